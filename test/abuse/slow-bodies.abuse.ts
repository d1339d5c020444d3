/*
 * Slow clients against the real server process (server.ts): connections that trickle their
 * headers or body, or send nothing at all, from one source address. Those within the
 * per-source connection cap must be answered 408 and closed once REQUEST_TIMEOUT_MS has
 * passed, however steadily they trickle; those over it are answered 429 at once; other
 * clients are served as usual meanwhile; and on SIGTERM the process must not wait for them.
 */
import { connect } from 'node:net'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { send } from '../support/http.js'
import { startServer } from '../support/service-process.js'
import { until } from '../support/wait.js'

const ATTACKER = '127.0.0.9'
/** The well-behaved request SIGTERM must drain. */
const DRAINED = '127.0.0.10'
const CONNECTIONS = 300
// The issue's bound for closing every slow connection: REQUEST_TIMEOUT_MS (10 s by default)
// plus the deadline checks, with room for a busy machine.
const ALL_CLOSED_WITHIN_MS = 30_000

type Trickle = 'body' | 'headers' | 'silent'

interface SlowConnection {
  /** Resolves once connected and, unless silent, the first bytes are written. */
  opened: Promise<void>
  /** Resolves when the server closed the connection: after how long, and what it answered. */
  closed: Promise<{ afterMs: number, answer: string }>
  destroy: () => void
}

/** One slow client: a byte (or a header line) a second, never finishing, or nothing at all. */
function slowConnection (port: number, trickle: Trickle): SlowConnection {
  const socket = connect({ port, host: '127.0.0.1', localAddress: ATTACKER })
  const started = Date.now()
  let answer = ''
  let timer: NodeJS.Timeout | undefined
  socket.on('data', (chunk: Buffer) => { answer += chunk.toString() })
  socket.on('error', () => {})
  const opened = new Promise<void>((resolve) => {
    socket.on('connect', () => {
      if (trickle === 'silent') {
        resolve()
        return
      }
      const head = trickle === 'body'
        ? 'POST /otp/request HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"email":"'
        : 'POST /otp/request HTTP/1.1\r\nHost: x\r\n'
      socket.write(head, () => { resolve() })
      // Steady activity: an inactivity timeout alone would never fire.
      let sent = 0
      timer = setInterval(() => { socket.write(trickle === 'body' ? 'a' : `X-Slow-${sent++}: 1\r\n`) }, 1000)
    })
  })
  const closed = once(socket, 'close').then(() => {
    clearInterval(timer)
    return { afterMs: Date.now() - started, answer }
  })
  return { opened, closed, destroy: () => { clearInterval(timer); socket.destroy() } }
}

function percentile (sorted: number[], fraction: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? Number.NaN
}

function summary (latencies: number[]): string {
  const sorted = [...latencies].sort((a, b) => a - b)
  return `n=${sorted.length} median ${percentile(sorted, 0.5).toFixed(1)} ms, p95 ${percentile(sorted, 0.95).toFixed(1)} ms, max ${(sorted.at(-1) ?? Number.NaN).toFixed(1)} ms`
}

/** A well-behaved client: a fresh connection per request, /healthz and a dispatch in turn. */
async function probe (port: number, round: number): Promise<{ status: number, ms: number }> {
  const started = performance.now()
  const answer = round % 2 === 0
    ? await send({ port, method: 'GET', path: '/healthz' })
    : await send({
      port,
      path: '/otp/request',
      headers: { authorization: `Bearer ${DEMO_SANDBOX_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ email: `probe${round}@example.com` })
    })
  return { status: answer.status, ms: performance.now() - started }
}

async function probeWhile (port: number, running: () => boolean): Promise<Array<{ status: number, ms: number }>> {
  const results: Array<{ status: number, ms: number }> = []
  for (let round = 0; running(); round++) {
    results.push(await probe(port, round))
    await sleep(50)
  }
  return results
}

t.test(`${CONNECTIONS} slow connections from one source are closed in time and do not slow others`, async (t) => {
  const server = await startServer(t, { LOG_LEVEL: 'warn' })
  const port = Number(new URL(server.base).port)

  let baselineDone = false
  const baselineRun = probeWhile(port, () => !baselineDone)
  await sleep(3000)
  baselineDone = true
  const baseline = await baselineRun

  const started = Date.now()
  const kinds: Trickle[] = ['body', 'body', 'body', 'body', 'headers', 'silent']
  const connections = Array.from({ length: CONNECTIONS }, (_, index) => slowConnection(port, kinds[index % kinds.length] as Trickle))
  t.teardown(() => { for (const connection of connections) connection.destroy() })

  let open = connections.length
  const closings = connections.map(async (connection) => {
    const result = await connection.closed
    open--
    return result
  })
  const during = probeWhile(port, () => open > 0 && Date.now() - started < ALL_CLOSED_WITHIN_MS)
  const bound = sleep(ALL_CLOSED_WITHIN_MS).then(() => null)
  const outcome = await Promise.race([Promise.all(closings), bound])
  const attacked = await during

  t.not(outcome, null, `all ${CONNECTIONS} slow connections closed within ${ALL_CLOSED_WITHIN_MS / 1000} s (${open} still open)`)
  if (outcome === null) return
  const answers = outcome.map(({ answer }) => {
    const [head = '', body = ''] = answer.split('\r\n\r\n')
    const status = /^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1]
    let code: unknown
    try { code = JSON.parse(body).code } catch { code = null }
    return `${status ?? 'none'} ${String(code)}`
  })
  const counts = new Map<string, number>()
  for (const answer of answers) counts.set(answer, (counts.get(answer) ?? 0) + 1)
  t.comment(`answers: ${[...counts].map(([answer, count]) => `${count} × ${answer}`).join(', ')}`)
  t.same([...counts.keys()].filter((answer) => answer !== '408 REQUEST_TIMEOUT' && answer !== '429 RATE_LIMITED'), [],
    'every slow connection was answered 408 REQUEST_TIMEOUT or, over the per-source cap, 429 RATE_LIMITED')
  t.equal(counts.get('408 REQUEST_TIMEOUT'), 128, 'the default cap (128) held the rest until their deadline')
  const held = outcome.filter((_, index) => answers[index] === '408 REQUEST_TIMEOUT').map((result) => result.afterMs)
  t.comment(`held connections closed after ${Math.min(...held)}–${Math.max(...held)} ms`)

  t.comment(`other client before the attack: ${summary(baseline.map((result) => result.ms))}`)
  t.comment(`other client during the attack: ${summary(attacked.map((result) => result.ms))}`)
  t.ok(attacked.length >= 10, `the other client kept being served (${attacked.length} requests)`)
  t.same([...new Set(attacked.map((result) => result.status))], [200], 'every request of the other client succeeded')
  // A hang guard, not a performance claim: the figures above are what docs/security.md quotes.
  t.ok(Math.max(...attacked.map((result) => result.ms)) < 5000, 'no request of the other client waited for the slow ones')
})

t.test('SIGTERM drains requests in flight and does not wait for requests still being uploaded', async (t) => {
  // A deadline far beyond the grace period: only cutting the uploads short lets it exit cleanly.
  const server = await startServer(t, { LOG_LEVEL: 'info', REQUEST_TIMEOUT_MS: '120000', SHUTDOWN_GRACE_MS: '60000', MAIL_TIMEOUT_MS: '2000' })
  const port = Number(new URL(server.base).port)
  /** Request lines the service logged from `address`, once their headers were read. */
  const received = (address: string): number => server.output().split('\n').filter((line) => line.includes('"msg":"incoming request"') && line.includes(`"remoteAddress":"${address}"`)).length
  const connections = Array.from({ length: 50 }, (_, index) => slowConnection(port, index % 2 === 0 ? 'body' : 'headers'))
  t.teardown(() => { for (const connection of connections) connection.destroy() })
  await Promise.all(connections.map(async (connection) => { await connection.opened }))
  // The 25 uploading a body have sent their headers: the service has them all in hand.
  await until('the service to read the slow uploads\' headers', () => received(ATTACKER) === 25)
  // Received in full (one small write), then waits MAIL_TIMEOUT_MS for a provider that never answers.
  const inFlight = send({
    port,
    localAddress: DRAINED,
    path: '/otp/request',
    headers: { authorization: `Bearer ${DEMO_SANDBOX_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'slow@simulator.invalid' })
  })
  await until('the service to receive the request that will be drained', () => received(DRAINED) === 1)

  const exited = once(server.child, 'exit')
  const signalled = Date.now()
  server.child.kill('SIGTERM')
  const drained = await inFlight
  t.same([drained.status, drained.body.code], [502, 'DELIVERY_FAILED'], 'the request in flight got its answer')
  const [code] = await Promise.race([exited, sleep(30_000).then(() => [null])])
  t.equal(code, 0, `exited cleanly, ${Date.now() - signalled} ms after SIGTERM`)
  const closed = await Promise.race([Promise.all(connections.map(async (connection) => await connection.closed)), sleep(1000).then(() => null)])
  t.not(closed, null, 'the slow uploads were closed')
})
