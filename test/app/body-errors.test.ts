/*
 * A refused body and the connection it came on, over real sockets: once the request has been
 * read to its end (malformed JSON; an oversized body of at most DRAIN_LIMIT_BYTES, read and
 * dropped) the connection serves the next request; a longer or undeclared oversized body
 * closes it unread; an oversized body that never finishes is closed by REQUEST_TIMEOUT_MS.
 */
import t from 'tap'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { DRAIN_LIMIT_BYTES } from '../../plugins/errors.js'
import { buildApp } from '../helper.js'
import { listenApp, openConnection, type RawConnection } from '../support/http.js'
import { until } from '../support/wait.js'

const head = (length: number): string =>
  `POST /otp/request HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${DEMO_SANDBOX_KEY}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`

/** Waits for the next complete answer (headers and JSON body) after `from` characters. */
async function answerAfter (connection: RawConnection, from: number): Promise<string> {
  await until('an answer', () => /\r\n\r\n\{[^]*\}$/.test(connection.received().slice(from)))
  return connection.received().slice(from)
}

async function healthOn (connection: RawConnection): Promise<string> {
  const before = connection.received().length
  connection.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
  return await answerAfter(connection, before)
}

t.test('malformed JSON is answered 400 and the connection serves the next request', async (t) => {
  const { app } = await buildApp(t)
  const connection = await openConnection(await listenApp(app))
  t.teardown(() => { connection.socket.destroy() })
  const body = '{"email": "someone@example.com"'
  connection.socket.write(head(Buffer.byteLength(body)) + body)
  const answer = await answerAfter(connection, 0)
  t.match(answer, /^HTTP\/1\.1 400 [^]*"code":"INVALID_JSON"/)
  t.notMatch(answer, /connection: close/i)
  t.match(await healthOn(connection), /^HTTP\/1\.1 200 /, 'answered on the same connection')
})

t.test(`a body over the limit, declared at most ${DRAIN_LIMIT_BYTES} bytes, is read and dropped: 413 and the connection stays`, async (t) => {
  const { app } = await buildApp(t)
  const connection = await openConnection(await listenApp(app))
  t.teardown(() => { connection.socket.destroy() })
  const body = JSON.stringify({ email: 'a'.repeat(8000) + '@example.com' })
  connection.socket.write(head(Buffer.byteLength(body)) + body)
  const answer = await answerAfter(connection, 0)
  t.match(answer, /^HTTP\/1\.1 413 [^]*"code":"PAYLOAD_TOO_LARGE"/)
  t.notMatch(answer, /connection: close/i)
  t.match(await healthOn(connection), /^HTTP\/1\.1 200 /, 'the dropped body was not read as a request')
})

t.test('a body declared over the drain limit is refused unread and the connection closed', async (t) => {
  const { app } = await buildApp(t)
  const connection = await openConnection(await listenApp(app))
  t.teardown(() => { connection.socket.destroy() })
  connection.socket.write(head(DRAIN_LIMIT_BYTES + 1) + '{"email":"')
  const answer = await answerAfter(connection, 0)
  t.match(answer, /^HTTP\/1\.1 413 [^]*connection: close/i)
  await connection.closed
  t.pass('closed by the service')
})

t.test('an over-limit body that never finishes is closed by REQUEST_TIMEOUT_MS', async (t) => {
  const { app } = await buildApp(t, { REQUEST_TIMEOUT_MS: '500' })
  const connection = await openConnection(await listenApp(app))
  t.teardown(() => { connection.socket.destroy() })
  connection.socket.write(head(6000) + '{"email":"' + 'a'.repeat(4500))
  await connection.closed
  t.match(connection.received(), /^HTTP\/1\.1 (408|413) /, 'answered, then closed')
  t.notMatch(connection.received(), /HTTP\/1\.1 200/, 'nothing else was served')
})
