/*
 * The per-source connection cap over real sockets, at its default (MAX_CONNECTIONS_PER_SOURCE,
 * 128): the 129th connection from one address is answered 429 at once and closed, the 128 stay
 * usable, other addresses are not affected, a closed connection frees its place, and the
 * proxies in TRUST_PROXY, through which every client arrives, have no cap. Past the bound of
 * what may wait pipelined on one connection, the request running keeps its answer, sent with
 * `Connection: close`, none of those waiting is run, the server reads no more from it and
 * the requests already read behind it are never routed nor logged. An answer the client does
 * not take closes its connection after REQUEST_TIMEOUT_MS. Expect: 100-continue is granted
 * only to a body the route would read; other expectations are answered 417 in the error
 * shape, as turns of their connection. The abuse suite
 * (test/abuse/slow-bodies.abuse.ts) holds 300 slow connections against a real process.
 */
import { once } from 'node:events'
import type { IncomingMessage } from 'node:http'
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { buildApp, TEST_METRICS_TOKEN } from '../helper.js'
import { PIPELINED_BYTES_PER_CONNECTION, PIPELINED_PER_CONNECTION } from '../../plugins/connections.js'
import { listenApp, openConnection, send, type RawConnection } from '../support/http.js'
import { until } from '../support/wait.js'

const CAP = 128
const PROXY = '127.0.0.2'
const CLIENT = '127.0.0.3'
const OTHER = '127.0.0.4'

/** GET /healthz on a held connection, answered on it; rejects if the server closed it instead. */
async function healthOn (connection: RawConnection): Promise<void> {
  const before = connection.received().length
  const answered = until('the answer on the held connection', () => /^HTTP\/1\.1 200 [^]*\{"ok":true\}$/.test(connection.received().slice(before)))
  const refused = connection.closed.then(() => { throw new Error(`the server closed the connection: ${connection.received().split('\r\n')[0] ?? ''}`) })
  connection.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
  await Promise.race([answered, refused])
}

t.test(`one address holds at most ${CAP} connections; a trusted proxy has no cap`, async (t) => {
  const { app } = await buildApp(t, { TRUST_PROXY: PROXY, REQUEST_TIMEOUT_MS: '120000' })
  const port = await listenApp(app)
  const held: RawConnection[] = []
  t.teardown(() => { for (const connection of held) connection.socket.destroy() })

  // One at a time: the server takes connections in the order they were established.
  for (let i = 0; i < CAP; i++) held.push(await openConnection(port, CLIENT))
  const over = await openConnection(port, CLIENT)
  await over.closed
  const [head = '', body = ''] = over.received().split('\r\n\r\n')
  t.match(head, /^HTTP\/1\.1 429 Too Many Requests\r\n/, `connection ${CAP + 1} is answered 429 at once`)
  t.match(head, /\r\nRetry-After: 1\r\n/)
  t.match(head, /\r\nX-Request-Id: [0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\r\n/, 'the refusal carries an X-Request-Id, as the document says every answer does')
  t.same(JSON.parse(body), { success: false, message: 'Too many open connections from this address', code: 'RATE_LIMITED' })
  await healthOn(held[0] as RawConnection)
  await healthOn(held[CAP - 1] as RawConnection)
  t.pass(`the ${CAP} held connections are served`)
  t.equal((await send({ port, localAddress: OTHER, method: 'GET', path: '/healthz' })).status, 200, 'another address is not affected')
  const metrics = (await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })).body
  t.match(metrics, /\nemail_otp_errors_total\{code="RATE_LIMITED"\} 1\n/, 'the refusal is counted')

  const freed = held.shift() as RawConnection
  freed.socket.destroy()
  await freed.closed
  // The server learns of the close on its own turn of the event loop: until then a new
  // connection may still find the place taken.
  await until('a closed connection to free its place', async () => {
    const again = await openConnection(port, CLIENT)
    held.push(again)
    again.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
    await Promise.race([again.closed, until('an answer', () => again.received().includes('\r\n\r\n'))])
    return again.received().startsWith('HTTP/1.1 200 ')
  })
  t.pass('a closed connection frees its place')

  const throughProxy: RawConnection[] = []
  for (let i = 0; i < CAP + 72; i++) throughProxy.push(await openConnection(port, PROXY))
  held.push(...throughProxy)
  await Promise.all(throughProxy.map(healthOn))
  t.pass(`${CAP + 72} connections from the trusted proxy, every one served`)
})

t.test('requests pipelined on one connection are each answered, in order, and the connection stays usable', async (t) => {
  const { app } = await buildApp(t)
  const connection = await openConnection(await listenApp(app), CLIENT)
  t.teardown(() => connection.socket.destroy())
  const paths = ['/healthz', '/nope', '/healthz', '/openapi.json', '/nope', '/healthz', '/healthz', '/nope']
  connection.socket.write(paths.map((path) => `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`).join(''))
  const statuses = (): number[] => [...connection.received().matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((match) => Number(match[1]))
  await until('every pipelined request answered', () => statuses().length === paths.length)
  t.same(statuses(), [200, 404, 200, 200, 404, 200, 200, 404], 'each answered, in the order they were sent')
  await healthOn(connection)
  t.pass('the connection serves the next request')
})

/**
 * Writes `requests` at once on a new connection from CLIENT and returns, once the server has
 * closed it, the answers' heads; a reset (closed with bytes still unread) is a close too.
 */
async function pipelinedOverBound (t: Test, requests: string): Promise<string[]> {
  const { app } = await buildApp(t)
  const connection = await openConnection(await listenApp(app), CLIENT)
  t.teardown(() => connection.socket.destroy())
  connection.socket.write(requests)
  await connection.closed.catch(() => {})
  return connection.received().split(/(?=HTTP\/1\.1 )/).filter((answer) => answer !== '').map((answer) => answer.split('\r\n\r\n')[0] ?? '')
}

const HEALTH = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'

t.test(`past ${PIPELINED_PER_CONNECTION} waiting, the running request is answered with Connection: close and none of those waiting is run`, async (t) => {
  const heads = await pipelinedOverBound(t, HEALTH.repeat(PIPELINED_PER_CONNECTION + 4))
  t.equal(heads.length, 1, 'one answer: the running request\'s')
  t.match(heads[0], /^HTTP\/1\.1 200 [^]*\r\nConnection: close(\r\n|$)/i)
})

t.test(`bodies declared past ${PIPELINED_BYTES_PER_CONNECTION} bytes behind the running request close the connection after its answer`, async (t) => {
  const post = (length: number): string => `POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`
  // The body is not sent: what is declared counts, before any of it is read.
  const declared = await pipelinedOverBound(t, HEALTH + post(PIPELINED_BYTES_PER_CONNECTION + 1))
  t.equal(declared.length, 1, 'one answer: the running request\'s')
  t.match(declared[0], /^HTTP\/1\.1 200 [^]*\r\nConnection: close(\r\n|$)/i)
  const chunked = await pipelinedOverBound(t, HEALTH + 'POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n')
  t.equal(chunked.length, 1, 'a chunked body of unknown length waits over the budget')
  t.match(chunked[0], /^HTTP\/1\.1 200 [^]*\r\nConnection: close(\r\n|$)/i)
})

t.test('bodies within the budget wait their turn and are answered', async (t) => {
  const { app } = await buildApp(t)
  const connection = await openConnection(await listenApp(app), CLIENT)
  t.teardown(() => connection.socket.destroy())
  const body = JSON.stringify({ pad: 'x'.repeat(2000) })
  const post = `POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`
  connection.socket.write(HEALTH + post + post)
  const statuses = (): number[] => [...connection.received().matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((match) => Number(match[1]))
  await until('every pipelined request answered', () => statuses().length === 3)
  t.same(statuses(), [200, 404, 404])
  t.notMatch(connection.received(), /\r\nConnection: close\r\n/i)
  await healthOn(connection)
  t.pass('the connection serves the next request')
})

const OPENAPI = 'GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n'

/** A connection from CLIENT that never reads what the server sends, and the server's end of it. */
async function nonReader (t: Test, stallMs: number): Promise<{ client: Socket, server: () => Socket, readAtBound: () => number | undefined, closed: Promise<unknown>, logs: { lines: string[] } }> {
  const { app, logs } = await buildApp(t, { REQUEST_TIMEOUT_MS: String(stallMs) })
  const port = await listenApp(app)
  const accepted: Socket[] = []
  app.server.on('connection', (socket: Socket) => { accepted.push(socket) })
  // What the server had read when it parsed the request past the bound: the running one, those waiting, then it.
  let parsed = 0
  let readAtBound: number | undefined
  app.server.on('request', (request: IncomingMessage) => {
    if (++parsed === PIPELINED_PER_CONNECTION + 2) readAtBound = request.socket.bytesRead
  })
  const client = connect({ port, host: '127.0.0.1', localAddress: CLIENT })
  // Paused before it connects: not even the socket's own buffer is filled.
  client.pause()
  client.on('error', () => {})
  t.teardown(() => client.destroy())
  // Not once(): a reset comes as an error before the close.
  const closed = new Promise((resolve) => { client.once('close', resolve) })
  await once(client, 'connect')
  await until('the server to accept the connection', () => accepted.length === 1)
  return { client, server: () => accepted[0] as Socket, readAtBound: () => readAtBound, closed, logs }
}

t.test('a client that pipelines and never reads: the server stops reading at the bound, routes none of what it read past it, and closes the connection', async (t) => {
  const { client, server, readAtBound, closed, logs } = await nonReader(t, 1000)
  let open = true
  void closed.then(() => { open = false })
  // One request per write, as fast as the client's own buffer takes them.
  const pump = (): void => { while (!client.destroyed && client.writableLength < 256 * 1024) client.write(OPENAPI) }
  pump()
  client.on('drain', pump)
  const topUp = setInterval(pump, 5)
  t.teardown(() => { clearInterval(topUp) })
  await until('the server to close the connection', () => !open)
  const sent = client.bytesWritten
  t.ok(sent > 1024 * 1024, `the client wrote ${sent} bytes`)
  t.ok(server().bytesRead <= 128 * 1024, `the server read ${server().bytesRead} of them`)
  t.equal(server().bytesRead, readAtBound(), 'nothing after the read that carried the request past the bound')
  const routed = logs.lines.filter((line) => line.includes('"incoming request"')).length
  t.ok(routed <= PIPELINED_PER_CONNECTION + 2, `${routed} requests routed: the running one, those waiting and the one past the bound`)
})

t.test('a client that never reads answers more than the socket buffers hold is disconnected after the stall bound', async (t) => {
  const { client, server } = await nonReader(t, 1000)
  // Within the pipelining bound: 16 answers of ~300 KB, more than a loopback connection's
  // kernel buffers hold (a few MB) when its client does not read, so the last ones wait in the
  // process. The close is the server's: its FIN waits behind the unread bytes.
  client.write(OPENAPI.repeat(PIPELINED_PER_CONNECTION))
  await until('the server to destroy its end', () => server().destroyed)
  t.pass('destroyed')
})

t.test('requests read behind the bound in the same read are neither routed nor logged', async (t) => {
  const { app, logs } = await buildApp(t)
  const connection = await openConnection(await listenApp(app), CLIENT)
  t.teardown(() => connection.socket.destroy())
  const count = 1500
  connection.socket.write(HEALTH.repeat(count))
  await connection.closed.catch(() => {})
  t.equal([...connection.received().matchAll(/HTTP\/1\.1 200 /g)].length, 1, 'one answer')
  const routed = logs.lines.filter((line) => line.includes('"incoming request"')).length
  t.ok(routed <= PIPELINED_PER_CONNECTION + 2, `${routed} of ${count} requests routed`)
})

/** Writes `request` on a new connection and returns what came back within the first answer. */
async function firstAnswer (t: Test, request: string): Promise<string> {
  const { app } = await buildApp(t)
  const connection = await openConnection(await listenApp(app), CLIENT)
  t.teardown(() => connection.socket.destroy())
  connection.socket.write(request)
  await until('an answer with its body', () => /\r\n\r\n[^]*\}/.test(connection.received()))
  return connection.received()
}

t.test('Expect: 100-continue with a body over the route\'s limit is answered 413, without 100 Continue', async (t) => {
  const answer = await firstAnswer(t, 'POST /feedback/ses HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nExpect: 100-continue\r\nContent-Length: 100000000\r\n\r\n')
  t.match(answer, /^HTTP\/1\.1 413 /, 'the final answer comes first')
  t.notMatch(answer, /100 Continue/)
  t.match(answer, /\r\nX-Request-Id: [0-9a-f-]{36}\r\n/i)
  t.match(answer, /\r\nConnection: close\r\n/i, 'the client may send the body anyway: the connection closes')
  t.match(answer, /"code":"PAYLOAD_TOO_LARGE"/)
  // Under the size the service drains to keep a connection: it must not wait for a body it did not invite.
  const small = await firstAnswer(t, 'POST /otp/request HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n')
  t.match(small, /^HTTP\/1\.1 413 [^]*"code":"PAYLOAD_TOO_LARGE"/, 'a body just over the limit: 413 at once, not a wait for the body')
})

t.test('Expect: 100-continue with a body within the limit is granted, and the request answered', async (t) => {
  const { app } = await buildApp(t)
  const connection = await openConnection(await listenApp(app), CLIENT)
  t.teardown(() => connection.socket.destroy())
  connection.socket.write('POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n')
  await until('100 Continue', () => connection.received().startsWith('HTTP/1.1 100 Continue\r\n\r\n'))
  connection.socket.write('{}')
  await until('the answer', () => /HTTP\/1\.1 404 [^]*\}$/.test(connection.received()))
  t.pass('100 Continue, then the answer')
})

t.test('an unknown expectation is answered 417 in the error shape, and counts as a turn of its connection', async (t) => {
  const expecting = 'POST /otp/request HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}'
  const answer = await firstAnswer(t, expecting)
  t.match(answer, /^HTTP\/1\.1 417 /)
  t.match(answer, /\r\nX-Request-Id: [0-9a-f-]{36}\r\n/i)
  t.match(answer, /\r\nX-Content-Type-Options: nosniff\r\n/i, 'with the security headers of every answer')
  t.same(JSON.parse(answer.split('\r\n\r\n')[1] ?? ''), { success: false, message: 'The only Expect value this service meets is 100-continue', code: 'EXPECTATION_FAILED' })
  const heads = await pipelinedOverBound(t, 'GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n'.repeat(PIPELINED_PER_CONNECTION + 4))
  t.equal(heads.length, 1, 'past the bound, one answer, then the connection is closed')
  t.match(heads[0], /^HTTP\/1\.1 417 /)
})
