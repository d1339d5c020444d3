import t from 'tap'
import { DEMO_RESTRICTED_KEY, DEMO_SANDBOX_KEY } from '../../lib/tenants/registry.js'
import { generateKey } from '../../lib/tenants/api-keys.js'
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
