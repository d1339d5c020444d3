import { once } from 'node:events'
import { connect } from 'node:net'
import t from 'tap'
import { DEMO_RESTRICTED_KEY, DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { generateKey } from '../../lib/keys/api-keys.js'
import { bearer, buildApp, writeTenants } from '../helper.js'

const UNAUTHORIZED = { success: false, message: 'A valid API key is required: Authorization: Bearer <key>', code: 'UNAUTHORIZED' }
const payload = { email: 'ada@example.com' }

t.test('missing, malformed, unknown, revoked, expired and wrong-prefix keys get one identical 401', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path })
  const cases: Record<string, Record<string, string>> = {
    missing: {},
    'not bearer': { authorization: `Basic ${keys.acmeLive}` },
    'empty bearer': { authorization: 'Bearer ' },
    malformed: bearer('sk_live_short'),
    unknown: bearer(generateKey('secret', 'live')),
    revoked: bearer(keys.acmeRevoked),
    expired: bearer(keys.acmeExpired),
    'live key relabelled as test': bearer(keys.acmeLive.replace('sk_live_', 'sk_test_')),
    'huge header': { authorization: 'Bearer ' + 'a'.repeat(5000) }
  }
  for (const [name, headers] of Object.entries(cases)) {
    for (const url of ['/otp/request', '/otp/verify']) {
      const answer = await app.inject({ method: 'POST', url, headers, payload })
      t.equal(answer.statusCode, 401, `${name} on ${url}`)
      t.same(answer.json(), UNAUTHORIZED, `${name}: same body`)
      t.equal(answer.headers['www-authenticate'], 'Bearer realm="email-otp"')
    }
  }
})

t.test('the 401 comes before body validation', async (t) => {
  const { app } = await buildApp(t)
  const answer = await app.inject({ method: 'POST', url: '/otp/request', payload: { nope: true } })
  t.equal(answer.statusCode, 401)
})

t.test('restricted keys only from allowed origins', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path })
  const send = async (origin?: string) => await app.inject({
    method: 'POST',
    url: '/otp/request',
    headers: { ...bearer(keys.acmeBrowser), ...(origin === undefined ? {} : { origin }) },
    payload
  })
  for (const origin of ['https://app.acme.test', 'http://app.acme.test:8080', 'https://a.acme.dev', 'https://x.y.acme.dev', 'http://localhost:5173']) {
    t.equal((await send(origin)).statusCode, 200, `${origin} is allowed`)
  }
  for (const origin of [undefined, 'https://acme.dev', 'https://evil.test', 'https://app.acme.test.evil.test', 'https://evilacme.dev', 'http://localhost:3000', 'null', 'https://app.acme.test/path', 'javascript:alert(1)']) {
    const answer = await send(origin)
    t.equal(answer.statusCode, 403, `${String(origin)} is refused`)
    t.equal(answer.json().code, 'ORIGIN_NOT_ALLOWED')
  }
})

t.test('a secret key sent with an Origin header is refused', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path })
  const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeLive), origin: 'https://app.acme.test' }, payload })
  t.equal(answer.statusCode, 403)
  t.equal(answer.json().code, 'SECRET_KEY_IN_BROWSER')
})

t.test('CORS preflight is answered without a key, for any well-formed origin', async (t) => {
  const { app } = await buildApp(t)
  const preflight = await app.inject({
    method: 'OPTIONS',
    url: '/otp/request',
    headers: { origin: 'https://anything.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' }
  })
  t.equal(preflight.statusCode, 204)
  t.equal(preflight.headers['access-control-allow-origin'], 'https://anything.example')
  t.match(String(preflight.headers.vary), /Origin/)
  t.match(String(preflight.headers['access-control-allow-headers']), /Authorization/)
  t.match(String(preflight.headers['access-control-allow-methods']), /POST/)

  const garbage = await app.inject({
    method: 'OPTIONS',
    url: '/otp/request',
    headers: { origin: 'not an origin', 'access-control-request-method': 'POST' }
  })
  t.notOk(garbage.headers['access-control-allow-origin'], 'a malformed origin is not reflected')
})

t.test('the demo tenant works with the documented keys and no configuration', async (t) => {
  const { app, mail } = await buildApp(t)
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(DEMO_SANDBOX_KEY), payload })
  t.equal(sent.statusCode, 200)
  const verified = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(DEMO_SANDBOX_KEY), payload: { requestId: sent.json().data.requestId, userGuess: mail.codeFor('ada@example.com') } })
  t.equal(verified.statusCode, 200)
  const browser = await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(DEMO_RESTRICTED_KEY), origin: 'http://localhost:8080' }, payload })
  t.equal(browser.statusCode, 200, 'the restricted demo key works from localhost')
})

/** One request written byte for byte, so that repeated headers reach the service as sent. */
async function rawRequest (port: number, lines: string[], body: string): Promise<{ status: number, headers: string, body: any }> {
  const socket = connect(port, '127.0.0.1')
  let text = ''
  socket.on('data', (chunk: Buffer) => { text += chunk.toString() })
  socket.write([...lines, 'Connection: close', `Content-Length: ${Buffer.byteLength(body)}`, '', body].join('\r\n'))
  await once(socket, 'close')
  const [head = '', rest = ''] = text.split('\r\n\r\n')
  return { status: Number(head.slice(9, 12)), headers: head, body: JSON.parse(rest) }
}

t.test('more than one Authorization header is refused with the one 401, over a real socket', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening')
  const dispatch = async (authorizations: string[]) => await rawRequest(address.port, [
    'POST /otp/request HTTP/1.1', 'Host: x', 'Content-Type: application/json', ...authorizations
  ], JSON.stringify(payload))

  const single = await dispatch([`Authorization: Bearer ${keys.acmeLive}`])
  t.equal(single.status, 200, 'one header: the key is used')
  const cases: Record<string, string[]> = {
    "tenant A's key, then tenant B's": [`Authorization: Bearer ${keys.acmeLive}`, `Authorization: Bearer ${keys.globexTest}`],
    "tenant B's key, then tenant A's": [`Authorization: Bearer ${keys.globexTest}`, `Authorization: Bearer ${keys.acmeLive}`],
    'the same key twice': [`Authorization: Bearer ${keys.acmeLive}`, `Authorization: Bearer ${keys.acmeLive}`],
    'a valid key, then an empty header': [`Authorization: Bearer ${keys.acmeLive}`, 'Authorization: '],
    'spelled in different cases': [`authorization: Bearer ${keys.acmeLive}`, `AUTHORIZATION: Bearer ${keys.acmeLive}`],
    'three headers': [`Authorization: Bearer ${keys.acmeLive}`, `Authorization: Bearer ${keys.acmeLive}`, `Authorization: Bearer ${keys.acmeLive}`]
  }
  for (const [name, headers] of Object.entries(cases)) {
    const answer = await dispatch(headers)
    t.equal(answer.status, 401, name)
    t.same(answer.body, UNAUTHORIZED, `${name}: the same body as every 401`)
    t.match(answer.headers, /\r\nwww-authenticate: Bearer realm="email-otp"\r\n/i)
  }
  t.equal(mail.count, 1, 'only the single-header request sent a code')
})
