import t from 'tap'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { bearer, buildApp } from '../helper.js'

const auth = bearer(DEMO_SANDBOX_KEY)
const json = { ...auth, 'content-type': 'application/json' }

t.test('bad bodies get a 4xx with a stable code, never a 500', async (t) => {
  const { app } = await buildApp(t)
  const cases: Array<[string, string, Record<string, string>, string, number, string]> = [
    ['malformed JSON', '/otp/request', json, '{"email": ', 400, 'INVALID_JSON'],
    ['prototype poisoning', '/otp/request', json, '{"email":"a@b.co","__proto__":{"x":1}}', 400, 'INVALID_JSON'],
    ['empty body', '/otp/request', json, '', 400, 'INVALID_BODY'],
    ['array body', '/otp/request', json, '[]', 400, 'INVALID_BODY'],
    ['null body', '/otp/request', json, 'null', 400, 'INVALID_BODY'],
    ['missing email', '/otp/request', json, '{}', 400, 'INVALID_BODY'],
    ['email wrong type', '/otp/request', json, '{"email":42}', 400, 'INVALID_BODY'],
    ['unknown field', '/otp/request', json, '{"email":"a@b.co","admin":true}', 400, 'INVALID_BODY'],
    ['missing userGuess', '/otp/verify', json, '{"requestId":"otp_x"}', 400, 'INVALID_BODY'],
    ['numeric userGuess', '/otp/verify', json, '{"requestId":"otp_x","userGuess":123456}', 400, 'INVALID_BODY'],
    ['requestId with odd characters', '/otp/verify', json, '{"requestId":"../../etc","userGuess":"123456"}', 400, 'INVALID_BODY'],
    ['text/plain', '/otp/request', { ...auth, 'content-type': 'text/plain' }, 'email=a@b.co', 415, 'UNSUPPORTED_MEDIA_TYPE'],
    ['form encoded', '/otp/request', { ...auth, 'content-type': 'application/x-www-form-urlencoded' }, 'email=a@b.co', 415, 'UNSUPPORTED_MEDIA_TYPE'],
    ['too large', '/otp/request', json, JSON.stringify({ email: 'a'.repeat(5000) + '@b.co' }), 413, 'PAYLOAD_TOO_LARGE']
  ]
  for (const [name, url, headers, payload, status, code] of cases) {
    const answer = await app.inject({ method: 'POST', url, headers, payload })
    t.equal(answer.statusCode, status, `${name}: status`)
    const body = answer.json()
    t.equal(body.code, code, `${name}: code`)
    t.equal(body.success, false)
    t.type(body.message, 'string')
    t.notMatch(JSON.stringify(body), /at .*\.(ts|js):\d+/, `${name}: no stack`)
  }
})

t.test('validation errors name the field', async (t) => {
  const { app } = await buildApp(t)
  const unknown = await app.inject({ method: 'POST', url: '/otp/request', headers: json, payload: '{"email":"a@b.co","admin":true}' })
  t.match(unknown.json().message, /unknown field "admin"/)
  const missing = await app.inject({ method: 'POST', url: '/otp/verify', headers: json, payload: '{"requestId":"otp_x"}' })
  t.match(missing.json().message, /missing required field "userGuess"/)
  const wrongType = await app.inject({ method: 'POST', url: '/otp/request', headers: json, payload: '{"email":42}' })
  t.match(wrongType.json().message, /email must be string/)
})

t.test('an oversized body answers 413 without a key', async (t) => {
  const { app } = await buildApp(t)
  const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: { 'content-type': 'application/json' }, payload: 'x'.repeat(1024 * 1024) })
  t.equal(answer.statusCode, 413)
  t.equal(answer.json().code, 'PAYLOAD_TOO_LARGE')
})

t.test('unknown routes answer 404, known paths asked with another method 405 with Allow, in the same shape', async (t) => {
  const { app } = await buildApp(t)
  const cases = [['GET', '/nope', 404, 'NOT_FOUND', undefined], ['GET', '/otp/request', 405, 'METHOD_NOT_ALLOWED', 'POST, OPTIONS'], ['DELETE', '/otp/verify', 405, 'METHOD_NOT_ALLOWED', 'POST, OPTIONS'], ['POST', '/healthz', 405, 'METHOD_NOT_ALLOWED', 'GET, HEAD, OPTIONS']] as const
  for (const [method, url, status, code, allow] of cases) {
    const answer = await app.inject({ method, url, headers: auth })
    t.equal(answer.statusCode, status, `${method} ${url}`)
    t.same(Object.keys(answer.json()).sort(), ['code', 'message', 'success'])
    t.equal(answer.json().code, code)
    t.equal(answer.headers.allow, allow)
  }
})

t.test('hostile email addresses answer 400 INVALID_EMAIL', async (t) => {
  const { app, mail } = await buildApp(t)
  for (const email of ['a@b.c\r\nBcc: x@y.com', '"a b"@x.com', 'a@x.com(evil.com)', 'a@@b', 'Ünïcode@bücher.example', `${'a'.repeat(290)}@x.com`, 'Bob <bob@x.com>', 'a@localhost', 'a@[127.0.0.1]']) {
    const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: auth, payload: { email } })
    t.equal(answer.statusCode, 400, JSON.stringify(email))
    t.equal(answer.json().code, 'INVALID_EMAIL')
  }
  t.equal(mail.count, 0, 'no mail left for any of them')

  const idn = await app.inject({ method: 'POST', url: '/otp/request', headers: auth, payload: { email: '  user@Bücher.Example ' } })
  t.equal(idn.statusCode, 200, 'an internationalised domain is accepted')
  t.match(mail.text, /To: user@xn--bcher-kva\.example\n/, 'and mailed to its punycode form')
})

t.test('responses carry security headers and a request id', async (t) => {
  const { app } = await buildApp(t)
  const answer = await app.inject({ method: 'GET', url: '/healthz' })
  t.equal(answer.headers['x-content-type-options'], 'nosniff')
  t.match(String(answer.headers['x-request-id']), /^[0-9a-f-]{36}$/)
  t.ok(answer.headers['strict-transport-security'])
  for (const [method, url] of [['GET', '/healthz'], ['GET', '/nowhere'], ['POST', '/otp/verify'], ['POST', '/otp/request']] as const) {
    const other = await app.inject({ method, url })
    t.match(other.headers, {
      'cache-control': 'no-store',
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
      'strict-transport-security': /^max-age=\d+; includeSubDomains$/,
      'x-frame-options': 'DENY',
      'cross-origin-resource-policy': 'same-origin',
      'referrer-policy': 'no-referrer',
      'x-content-type-options': 'nosniff'
    }, `${method} ${url} (${other.statusCode}) carries the API set`)
    for (const page of ['cross-origin-opener-policy', 'origin-agent-cluster', 'x-dns-prefetch-control', 'x-download-options', 'x-permitted-cross-domain-policies', 'x-xss-protection']) {
      t.notOk(page in other.headers, `${method} ${url}: no ${page}, a header for pages`)
    }
  }
  const keys = await app.inject({ method: 'GET', url: '/.well-known/jwks.json' })
  t.match(String(keys.headers['cache-control']), /^public, max-age=\d+$/, 'the key set stays cacheable')
  const docs = await app.inject({ method: 'GET', url: '/docs' })
  t.equal(docs.statusCode, 200)
  t.notMatch(String(docs.headers['content-security-policy']), /^default-src 'none'/, 'the Swagger UI sets its own policy')
  t.match(docs.headers, {
    'x-frame-options': 'SAMEORIGIN',
    'cross-origin-opener-policy': 'same-origin',
    'x-content-type-options': 'nosniff',
    'strict-transport-security': /^max-age=/
  }, 'the documentation pages carry helmet\'s page set')
})

t.test('a malformed URL answers in the contract shape', async (t) => {
  const { app } = await buildApp(t)
  for (const url of ['/%ZZ', '/otp/%ZZ', '/%E0%A4%A?x=secret']) {
    const answer = await app.inject({ method: 'GET', url })
    t.equal(answer.statusCode, 400)
    t.same(answer.json(), { success: false, message: 'The request URL is malformed', code: 'INVALID_URL' })
  }
})
