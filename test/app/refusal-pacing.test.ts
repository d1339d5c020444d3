/**
 * Refusal pacing over real sockets (REFUSAL_PACE_*): a source that keeps asking after it is
 * refused gets its refusals at the pace, so a closed loop of refused requests slows to the
 * pace instead of taking the event loop; other sources, and the paced source's admitted
 * requests, are answered as before.
 */
import { test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildApp, TEST_METRICS_TOKEN, writeTenants } from '../helper.js'
import { listenApp, send, type RawAnswer } from '../support/http.js'

const PACE = { REFUSAL_PACE_PER_SECOND: '5', REFUSAL_PACE_BURST: '5', REFUSAL_PACE_MAX_DELAY_MS: '2000' }
const FLOOD_MS = 3000
const LOOPS = 4
/** What the pace lets through in the flood: the burst, the one its tolerance leaves, 5 a second while it runs and while the last holds end, and the loops' last requests. */
const PACED_BOUND = 5 + 1 + 5 * (FLOOD_MS + 2000) / 1000 + LOOPS

const refused = (port: number, localAddress: string, headers: Record<string, string> = {}): Promise<RawAnswer> =>
  send({ port, localAddress, path: '/otp/verify', headers: { authorization: 'Bearer not-a-key', 'content-type': 'application/json', ...headers }, body: '{"requestId":"x","code":"123456"}' })

async function timed<T> (call: () => Promise<T>): Promise<{ answer: T, ms: number }> {
  const started = performance.now()
  const answer = await call()
  return { answer, ms: performance.now() - started }
}

/** LOOPS closed loops of refused requests from `localAddress` for FLOOD_MS, each a new connection; the answers by status. */
async function flood (port: number, localAddress: string, headers: Record<string, string> = {}): Promise<Map<number, number>> {
  const statuses = new Map<number, number>()
  const end = performance.now() + FLOOD_MS
  await Promise.all(Array.from({ length: LOOPS }, async () => {
    while (performance.now() < end) {
      const { status } = await refused(port, localAddress, headers)
      statuses.set(status, (statuses.get(status) ?? 0) + 1)
    }
  }))
  return statuses
}

async function pacedTotal (app: FastifyInstance): Promise<number> {
  const answer = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  return Number(/^email_otp_refusals_paced_total (\d+)/m.exec(answer.body)?.[1] ?? Number.NaN)
}

test('a flood of refusals from one source is answered at the pace; other sources and admitted answers are not held', async (t) => {
  const { path } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, ...PACE })
  const port = await listenApp(app)

  const flooding = flood(port, '127.0.0.2')
  await new Promise((resolve) => setTimeout(resolve, 1000))
  // Another source, refused too but within its own burst: answered at once, not held.
  const others = []
  for (let i = 0; i < 5; i++) others.push(await timed(() => refused(port, '127.0.0.3')))
  // The paced source's admitted request is not held either.
  const admitted = await timed(() => send({ port, localAddress: '127.0.0.2', method: 'GET', path: '/healthz' }))
  const statuses = await flooding

  const answers = [...statuses.values()].reduce((sum, count) => sum + count, 0)
  t.same([...statuses.keys()], [401], 'every flood request got its refusal')
  t.ok(answers <= PACED_BOUND, `${answers} answers to the flood in ${FLOOD_MS} ms (bound ${PACED_BOUND})`)
  t.ok(answers >= 6, 'the flood is paced, not stopped')
  t.same(others.map(({ answer }) => answer.status), [401, 401, 401, 401, 401])
  for (const { ms } of others) t.ok(ms < 1000, `another source's refusal answered in ${ms.toFixed(0)} ms, not held (a hold here lasts up to 2 s)`)
  t.equal(admitted.answer.status, 200)
  t.ok(admitted.ms < 1000, `the paced source's admitted request answered in ${admitted.ms.toFixed(0)} ms`)
  t.ok(await pacedTotal(app) >= answers - 6, 'the refusals past the burst are counted as paced')
})

test('without a pace the same flood is answered as fast as it comes (the bound above is the pace\'s)', async (t) => {
  const { path } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, REFUSAL_PACE_PER_SECOND: '0' })
  const port = await listenApp(app)
  const statuses = await flood(port, '127.0.0.2')
  const answers = statuses.get(401) ?? 0
  t.ok(answers > 2 * PACED_BOUND, `${answers} answers unpaced, against at most ${PACED_BOUND} paced`)
})

test('behind TRUST_PROXY each forwarded client has its own pace, so a proxy\'s other clients are not held', async (t) => {
  const { path } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: '127.0.0.1/32', ...PACE })
  const port = await listenApp(app)
  const flooding = flood(port, '127.0.0.1', { 'x-forwarded-for': '198.51.100.7' })
  await new Promise((resolve) => setTimeout(resolve, 1000))
  const other = await timed(() => refused(port, '127.0.0.1', { 'x-forwarded-for': '198.51.100.8' }))
  const statuses = await flooding
  const answers = statuses.get(401) ?? 0
  t.ok(answers <= PACED_BOUND, `${answers} answers to the forwarded client's flood (bound ${PACED_BOUND})`)
  t.equal(other.answer.status, 401)
  t.ok(other.ms < 1000, `another client through the same proxy answered in ${other.ms.toFixed(0)} ms`)
})

test('a shutdown answers the refusals it holds at once', async (t) => {
  const { path } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, REFUSAL_PACE_PER_SECOND: '1', REFUSAL_PACE_BURST: '1', REFUSAL_PACE_MAX_DELAY_MS: '30s' })
  const port = await listenApp(app)
  await refused(port, '127.0.0.2')
  await refused(port, '127.0.0.2')
  // The third is held (the pace is one a second after a burst of one; this one waits a second or more).
  const held = timed(() => refused(port, '127.0.0.2'))
  await new Promise((resolve) => setTimeout(resolve, 100))
  const fourth = timed(() => refused(port, '127.0.0.2'))
  await new Promise((resolve) => setTimeout(resolve, 200))
  const closing = app.close()
  const [third, last] = await Promise.all([held, fourth])
  await closing
  t.equal(third.answer.status, 401)
  t.equal(last.answer.status, 401, 'the held refusal is sent, not dropped')
  t.ok(last.ms < 1800, `held for up to 2 s by the pace, answered in ${last.ms.toFixed(0)} ms once the app closed`)
})
