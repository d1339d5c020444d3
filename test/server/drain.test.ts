import { once } from 'node:events'
import { Agent, request as httpRequest } from 'node:http'
import t from 'tap'
import { bearer, writeTenants } from '../helper.js'
import { send } from '../support/http.js'
import { freePort } from '../support/redis.js'
import { startServer } from '../support/service-process.js'

/** One GET on a keep-alive agent: the answer, and whether the socket was reused. */
async function keptAlive (agent: Agent, port: number, path: string): Promise<{ status: number, connection: string | undefined, reused: boolean }> {
  return await new Promise((resolve, reject) => {
    const outgoing = httpRequest({ host: '127.0.0.1', port, path, agent }, (response) => {
      response.resume()
      response.on('end', () => { resolve({ status: response.statusCode ?? 0, connection: response.headers.connection, reused: outgoing.reusedSocket }) })
    })
    outgoing.on('error', reject)
    outgoing.end()
  })
}

t.test('SIGTERM: /readyz answers 503 on both listeners while every route keeps serving, then a clean exit', async (t) => {
  const { path, keys } = writeTenants(t)
  const metricsPort = await freePort()
  // Long enough for the requests below on a busy machine; the test waits for the events, not the time.
  const server = await startServer(t, { TENANTS_FILE: path, METRICS_PORT: String(metricsPort), SHUTDOWN_DRAIN_MS: '8000', RATE_LIMIT_PUBLIC: '2/1m' })
  const port = Number(new URL(server.base).port)
  const probe = async (target: number) => await send({ port: target, method: 'GET', path: '/readyz', localAddress: '127.0.0.91' })

  const probes = []
  for (let i = 0; i < 6; i++) probes.push((await probe(i % 2 === 0 ? port : metricsPort)).status)
  t.same(probes, [200, 200, 200, 200, 200, 200], 'probes from one address are never throttled, past RATE_LIMIT_PUBLIC, on either listener')
  const scans = []
  for (let i = 0; i < 3; i++) scans.push((await send({ port, method: 'GET', path: `/nope/${i}`, localAddress: '127.0.0.91' })).status)
  t.same(scans, [404, 404, 429], 'while the public routes keep their limit')
  t.equal((await send({ port: metricsPort, method: 'GET', path: '/healthz' })).status, 200, 'liveness on the internal listener')

  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => { agent.destroy() })
  const before = await keptAlive(agent, port, '/healthz')
  t.same([before.status, before.connection], [200, 'keep-alive'], 'a keep-alive connection before the drain')

  const exited = once(server.child, 'exit')
  const mark = server.output().length
  server.child.kill('SIGTERM')
  await server.waitFor(/draining: \/readyz answers 503/, mark)

  const publicReady = await probe(port)
  t.same([publicReady.status, publicReady.body], [503, { ready: false }], '/readyz on the public listener: 503 at once')
  const internalReady = await probe(metricsPort)
  t.same([internalReady.status, internalReady.body.ready, internalReady.body.draining], [503, false, true], '/readyz on the internal listener: 503, and why')
  const operator = await send({ port, method: 'GET', path: '/readyz', headers: bearer('metrics-token-never-set-000000') })
  t.equal(operator.status, 503)

  const during = await keptAlive(agent, port, '/healthz')
  t.same([during.status, during.reused, during.connection], [200, true, 'close'], 'the open keep-alive connection is served, then closed')
  const sent = await send({ port, path: '/otp/request', headers: { ...bearer(keys.acmeLive), 'content-type': 'application/json' }, body: JSON.stringify({ email: 'drain@example.com' }) })
  t.equal(sent.status, 200, 'a dispatch during the drain is served')
  await server.waitFor(/To: drain@example\.com/, mark)
  const verified = await send({ port, path: '/otp/verify', headers: { ...bearer(keys.acmeLive), 'content-type': 'application/json' }, body: JSON.stringify({ requestId: sent.body.data.requestId, userGuess: /is (\d{6})\./.exec(server.output().slice(mark))?.[1] }) })
  t.equal(verified.status, 200, 'and so is its verify')
  t.notMatch(server.output().slice(mark), /shutting down: closing/, 'all of it within the drain')

  const [exitCode] = await exited
  t.equal(exitCode, 0, 'then the listeners close and the process exits cleanly')
  t.match(server.output().slice(mark), /shutting down: closing the listeners/)
})
