/*
 * Every error, from every layer, in the contract's shape, over real sockets: the routes with
 * odd methods, content types and bodies, and what node and Fastify answer on their own
 * (malformed HTTP, oversized headers, slow requests, bad percent-encoding, unknown paths,
 * wrong methods, CORS preflights).
 */
import { once } from 'node:events'
import { connect } from 'node:net'
import t from 'tap'
import { ConfigError, parseConfig } from '../../lib/config/from-env.js'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { errorCatalog } from '../../schemas/error-catalog.js'
import { responseHeaders } from '../../schemas/headers.js'
import { buildApp, TEST_METRICS_TOKEN } from '../helper.js'

/** The form openapi.json gives X-Request-Id, which it marks as sent on every answer. */
const documentedRequestId = new RegExp(responseHeaders['X-Request-Id'].schema.pattern ?? '^$')

interface RawAnswer {
  status: number
  head: string
  headers: Record<string, string>
  body: string
}

/** Writes the bytes as given and reads everything until the server closes the connection. */
async function raw (port: number, bytes: string): Promise<RawAnswer> {
  const socket = connect(port, '127.0.0.1')
  let text = ''
  socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
  socket.on('error', () => {})
  socket.write(bytes)
  await once(socket, 'close')
  const split = text.indexOf('\r\n\r\n')
  const head = split === -1 ? text : text.slice(0, split)
  const headers: Record<string, string> = {}
  for (const line of head.split('\r\n').slice(1)) {
    const colon = line.indexOf(':')
    if (colon > 0) headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
  }
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0), head, headers, body: split === -1 ? '' : text.slice(split + 4) }
}

function request (method: string, path: string, headers: Record<string, string>, body?: string): string {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: localhost', 'Connection: close', ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)]
  if (body !== undefined) lines.push(`Content-Length: ${Buffer.byteLength(body)}`)
  return `${lines.join('\r\n')}\r\n\r\n${body ?? ''}`
}

/** Why an answer breaks the contract, or null. */
function contractBreach (method: string, answer: RawAnswer): string | null {
  if (answer.status === 0) return 'no answer'
  if (answer.status >= 500) return `unexpected ${answer.status}`
  if (answer.status < 400) return null
  if (!/^application\/json/.test(answer.headers['content-type'] ?? '')) return `content type ${answer.headers['content-type'] ?? 'none'}`
  if (answer.status === 405 && answer.headers.allow === undefined) return '405 without Allow'
  // HEAD answers carry the headers of the error, not its body.
  if (method === 'HEAD') return null
  let body: Record<string, unknown>
  try {
    body = JSON.parse(answer.body)
  } catch {
    return `not JSON: ${answer.body.slice(0, 200)}`
  }
  if (Object.keys(body).sort().join() !== 'code,message,success' || body.success !== false || typeof body.message !== 'string') return `shape: ${answer.body.slice(0, 200)}`
  const catalogued = (errorCatalog as Record<string, { status: number } | undefined>)[String(body.code)]
  if (catalogued?.status !== answer.status) return `code ${String(body.code)} does not belong to ${answer.status}`
  return null
}

const PATHS = ['/otp/request', '/otp/verify', '/usage', '/verifications/otp_unknownRequest0000000', '/verifications/', '/verifications/a/b', '/sandbox/messages', '/healthz', '/readyz', '/metrics', '/openapi.json', '/docs', '/docs/json', '/docs/static/index.html', '/docs/static/nope', '/nope', '/otp', '/otp/request/']
const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'PROPFIND', 'SEARCH']
const CONTENT_TYPES = [undefined, 'application/json', 'application/json; charset=latin1', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'garbage/']
const BODIES = [undefined, '', '{}', '{"email":', 'x'.repeat(5000)]

t.test('every route, method, content type and body: errors in the contract\'s shape', async (t) => {
  const { app } = await buildApp(t, { LOG_LEVEL: 'silent' })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening')
  const cases: Array<{ method: string, bytes: string, label: string }> = []
  for (const path of PATHS) {
    for (const method of METHODS) {
      for (const contentType of CONTENT_TYPES) {
        for (const body of BODIES) {
          const headers: Record<string, string> = { authorization: `Bearer ${path === '/metrics' ? TEST_METRICS_TOKEN : DEMO_SANDBOX_KEY}` }
          if (contentType !== undefined) headers['content-type'] = contentType
          cases.push({ method, bytes: request(method, path, headers, body), label: `${method} ${path} ${contentType ?? '(no type)'} ${body === undefined ? '(no body)' : JSON.stringify(body.slice(0, 12))}` })
        }
      }
    }
  }
  const breaches: string[] = []
  const statuses = new Map<number, number>()
  // A few connections at a time, as clients would.
  for (let index = 0; index < cases.length; index += 16) {
    await Promise.all(cases.slice(index, index + 16).map(async ({ method, bytes, label }) => {
      const answer = await raw(address.port, bytes)
      statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1)
      const breach = contractBreach(method, answer)
      if (breach !== null) breaches.push(`${label}: ${breach}`)
    }))
  }
  t.comment(`${cases.length} requests; answers by status: ${[...statuses].sort(([a], [b]) => a - b).map(([status, count]) => `${status}×${count}`).join(', ')}`)
  t.same(breaches.slice(0, 20), [], 'every 4xx is { success: false, message, code } with a catalogued code of its status; 405 has Allow')
  t.ok(statuses.has(405) && statuses.has(404) && statuses.has(415) && statuses.has(400) && statuses.has(413), 'the cases reach 400, 404, 405, 413 and 415')
})

t.test('what node and Fastify answer on their own, in the contract\'s shape', async (t) => {
  const { app } = await buildApp(t, { LOG_LEVEL: 'silent', REQUEST_TIMEOUT_MS: '300' })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening')
  const port = address.port
  const expectations: Array<[string, string, number, string]> = [
    ['a request line that is not HTTP', 'GARBAGE\r\n\r\n', 400, 'MALFORMED_REQUEST'],
    ['an unknown method', 'FROB /otp/request HTTP/1.1\r\nHost: x\r\n\r\n', 400, 'MALFORMED_REQUEST'],
    ['Content-Length and Transfer-Encoding together', 'POST /otp/request HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}', 400, 'MALFORMED_REQUEST'],
    ['a header line without a colon', 'GET /healthz HTTP/1.1\r\nHost: x\r\nnot a header\r\n\r\n', 400, 'MALFORMED_REQUEST'],
    ['headers over the size limit', `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Filler: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'HEADERS_TOO_LARGE'],
    ['a body that never arrives', 'POST /otp/request HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{', 408, 'REQUEST_TIMEOUT'],
    ['headers that never end', 'POST /otp/request HTTP/1.1\r\nHost: x\r\n', 408, 'REQUEST_TIMEOUT'],
    ['a malformed percent-encoding', 'GET /%E0%A4%A HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 400, 'INVALID_URL'],
    ['a declared body over the limit', 'POST /otp/request HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 99999\r\n\r\n{}', 413, 'PAYLOAD_TOO_LARGE'],
    ['an empty JSON body, before the key is checked', 'POST /otp/request HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n', 400, 'INVALID_BODY'],
    ['an empty JSON body with a key', `POST /otp/request HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${DEMO_SANDBOX_KEY}\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n`, 400, 'INVALID_BODY'],
    ['an empty JSON body to OPTIONS', 'OPTIONS /otp/request HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n', 400, 'INVALID_BODY'],
    ['a wrong method on a known path', 'GET /otp/verify HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 405, 'METHOD_NOT_ALLOWED']
  ]
  for (const [name, bytes, status, code] of expectations) {
    const answer = await raw(port, bytes)
    t.equal(answer.status, status, name)
    t.equal(contractBreach('GET', answer), null, `${name}: the contract's shape`)
    t.equal(JSON.parse(answer.body || '{}').code, code, `${name}: ${code}`)
    t.match(answer.headers['x-request-id'], documentedRequestId, `${name}: an X-Request-Id of the documented form`)
  }
  const first = await raw(port, 'GARBAGE\r\n\r\n')
  const second = await raw(port, 'GARBAGE\r\n\r\n')
  t.not(first.headers['x-request-id'], second.headers['x-request-id'], 'each answer written on the connection has an id of its own')
  const keptAlive = await raw(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nPOST /otp/request HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{')
  t.match(keptAlive.body, /^\{"ok":true\}HTTP\/1\.1 408 Request Timeout\r\n[^]*"code":"REQUEST_TIMEOUT"\}$/, 'on a kept-alive connection the next request has its own deadline')
  const wrongMethod = await raw(port, 'PUT /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n')
  t.equal(wrongMethod.headers.allow, 'GET, HEAD, OPTIONS', '405 names the methods in Allow')

  const options = await raw(port, 'OPTIONS /otp/request HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  t.same([options.status, options.headers.allow], [204, 'POST, OPTIONS'], 'an OPTIONS that is no preflight: 204 with Allow')
  const halfPreflight = await raw(port, 'OPTIONS /otp/request HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: https://app.example\r\n\r\n')
  t.equal(halfPreflight.status, 204, 'an OPTIONS with an Origin but no requested method is answered as a preflight, not with a text/plain 400')
  const unknownOptions = await raw(port, 'OPTIONS /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  t.same([unknownOptions.status, JSON.parse(unknownOptions.body).code], [404, 'NOT_FOUND'])
})

t.test('connection-level refusals are logged at debug only and counted in email_otp_errors_total', async (t) => {
  const refusals: Array<[string, string, number, string]> = [
    ['headers over the size limit', `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Filler: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'HEADERS_TOO_LARGE'],
    ['a body that never arrives', 'POST /otp/request HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{', 408, 'REQUEST_TIMEOUT'],
    ['headers that never end', 'POST /otp/request HTTP/1.1\r\nHost: x\r\n', 408, 'REQUEST_TIMEOUT'],
    ['a request line that is not HTTP', 'GARBAGE\r\n\r\n', 400, 'MALFORMED_REQUEST']
  ]
  for (const level of ['debug', 'info'] as const) {
    const { app, logs } = await buildApp(t, { LOG_LEVEL: level, REQUEST_TIMEOUT_MS: '300' })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const address = app.server.address()
    if (address === null || typeof address === 'string') throw new Error('not listening')
    const started = logs.lines.length
    for (const [name, bytes, status, code] of refusals) {
      const answer = await raw(address.port, bytes)
      t.same([answer.status, JSON.parse(answer.body || '{}').code], [status, code], `${level}: ${name}`)
    }
    const lines = logs.lines.slice(started).map((line) => JSON.parse(line))
    const refused = lines.filter((line) => line.msg === 'connection closed on a client error')
    t.same(refused.map((line) => [line.level, line.code]), level === 'debug' ? refusals.map(([, , , code]) => [20, code]) : [],
      `${level}: one debug line per refusal, naming its code${level === 'debug' ? '' : ', none at info'}`)
    // The body that never arrived belonged to a request whose headers did: its ordinary
    // request line, and nothing else.
    t.same(lines.filter((line) => line.level >= 30).map((line) => line.msg), ['incoming request'], `${level}: nothing else at info or above`)

    const metrics = (await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })).body
    const counted = metrics.split('\n').filter((line) => line.startsWith('email_otp_errors_total{')).sort()
    t.same(counted, [
      'email_otp_errors_total{code="HEADERS_TOO_LARGE"} 1',
      'email_otp_errors_total{code="MALFORMED_REQUEST"} 1',
      'email_otp_errors_total{code="REQUEST_TIMEOUT"} 2'
    ], `${level}: each counted once under its code, the cut-short body not again as another error`)
  }
})

t.test('slow-client configuration rules', async (t) => {
  const config = parseConfig({})
  t.equal(config.requestTimeoutMs, 10_000)
  t.equal(config.keepAliveTimeoutMs, 72_000)
  t.equal(config.maxConnectionsPerSource, 128)
  t.equal(parseConfig({ MAX_CONNECTIONS_PER_SOURCE: '0' }).maxConnectionsPerSource, 0, '0: no limit')
  for (const [variable, value, rule] of [
    ['REQUEST_TIMEOUT_MS', '0', 'must be a duration from 100ms to 5m'],
    ['KEEP_ALIVE_TIMEOUT_MS', 'soon', 'must be a duration from 100ms to 65m'],
    ['MAX_CONNECTIONS_PER_SOURCE', '-1', 'must be an integer from 0 to 1000000']
  ] as const) {
    const error = t.throws(() => parseConfig({ [variable]: value })) as ConfigError
    t.equal(error.variable, variable)
    t.match(error.message, `${variable} ${rule}`)
  }
})
