import { Agent, request } from 'node:http'
import t from 'tap'
import { buildApp, TEST_METRICS_TOKEN } from '../helper.js'
import { listenApp } from '../support/http.js'

async function keepAliveHeader (port: number): Promise<string | undefined> {
  const agent = new Agent({ keepAlive: true })
  try {
    return await new Promise((resolve, reject) => {
      request({ host: '127.0.0.1', port, path: '/healthz', agent }, (response) => {
        response.resume()
        response.on('end', () => { resolve(response.headers['keep-alive'] as string | undefined) })
      }).on('error', reject).end()
    })
  } finally {
    agent.destroy()
  }
}

t.test('KEEP_ALIVE_TIMEOUT_MS: 72 s by default, up to past Envoy\'s one-hour idle timeout, announced to the client', async (t) => {
  const byDefault = await buildApp(t)
  t.equal(byDefault.app.config.keepAliveTimeoutMs, 72_000)
  t.equal(await keepAliveHeader(await listenApp(byDefault.app)), 'timeout=72', 'the answer tells a client or proxy when an idle connection closes')
  const longer = await buildApp(t, { KEEP_ALIVE_TIMEOUT_MS: '3700000' })
  t.equal(await keepAliveHeader(await listenApp(longer.app)), 'timeout=3700', 'longer than Envoy\'s default, for a mesh whose idle timeout cannot be lowered')
})

t.test('a keep-alive client that waits for each answer has every request served on its one connection, refusals within the pace\'s burst answered at once', async (t) => {
  const { app } = await buildApp(t)
  const port = await listenApp(app)
  let connections = 0
  app.server.on('connection', () => { connections++ })
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const ask = async (refused: boolean): Promise<number> => await new Promise((resolve, reject) => {
    const asked = request({
      host: '127.0.0.1',
      port,
      agent,
      method: refused ? 'POST' : 'GET',
      path: refused ? '/otp/verify' : '/healthz',
      headers: refused ? { authorization: 'Bearer not-a-key', 'content-type': 'application/json' } : {}
    }, (response) => {
      response.resume()
      response.on('end', () => { resolve(response.statusCode ?? 0) })
    }).on('error', reject)
    asked.setTimeout(10_000, () => { asked.destroy(new Error('no answer within 10 s')) })
    asked.end(refused ? '{"requestId":"x","code":"123456"}' : undefined)
  })
  const statuses: number[] = []
  for (let i = 0; i < 30; i++) statuses.push(await ask(i % 2 === 1))
  t.same(statuses, Array.from({ length: 30 }, (_, i) => i % 2 === 1 ? 401 : 200), 'every answer, in turn')
  t.equal(connections, 1, 'all on one connection')
  const metrics = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  t.match(metrics.body, /\nemail_otp_refusals_paced_total 0\n/, '15 refusals are within the burst of 40: none held')
})
