import t from 'tap'
import { bearer, buildApp, writeTenants } from '../helper.js'

t.test('logs carry no key, code or address', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app, mail, logs } = await buildApp(t, { TENANTS_FILE: path, LOG_LEVEL: 'trace' })
  const email = 'secret.person@example.com'
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email } })
  const requestId = sent.json().data.requestId
  const code = mail.codeFor(email)
  await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess: code } })
  await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess: code } })
  await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'bad@@' + email } })
  await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: '{"email": "' + email })
  await app.inject({ method: 'GET', url: `/nope?email=${encodeURIComponent(email)}`, headers: bearer(keys.acmeLive) })

  const text = logs.text
  t.ok(logs.lines.length > 10, 'requests were logged')
  t.ok(logs.lines.every((line) => { try { JSON.parse(line); return true } catch { return false } }), 'every line is JSON')
  t.match(text, /"requestId":"otp_/, 'the requestId is logged for correlation')
  t.match(text, /"reqId":"[0-9a-f-]{36}"/, 'request lines carry the request id')
  t.notMatch(text, keys.acmeLive, 'no key')
  t.notMatch(text, keys.acmeLive.slice(8, 30), 'no part of the key')
  t.notMatch(text, email, 'no address')
  t.notMatch(text, 'secret.person', 'no local part')
  t.notMatch(text, new RegExp(`\\b${code}\\b`), 'no code')
  t.notMatch(text, /authorization/i, 'no authorization header')
})

t.test('rejected requests log their error code; an OTP code under that name is still redacted', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app, logs } = await buildApp(t, { TENANTS_FILE: path })
  await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeLive), 'content-type': 'application/json' }, payload: '{"email": ' })
  await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: 'otp_x', userGuess: '123456', extra: 1 } })
  const rejected = logs.lines.map((line) => JSON.parse(line)).filter((line) => line.msg === 'request rejected')
  t.same(rejected.map((line) => line.code), ['INVALID_JSON', 'INVALID_BODY'], 'the stable error code is logged')
  t.notMatch(logs.text, /\[redacted\]/, 'nothing was redacted on the way')

  app.log.info({ code: '042917', nested: { userGuess: '042917' }, userGuess: '042917' }, 'a careless line')
  app.log.info({ code: 'NOT_A_CATALOG_CODE' }, 'another careless line')
  const careless = logs.lines.map((line) => JSON.parse(line)).filter((line) => /careless/.test(line.msg))
  t.same(careless.map((line) => line.code), ['[redacted]', '[redacted]'], 'only catalogued error codes pass under `code`')
  t.equal(careless[0].userGuess, '[redacted]')
  t.equal(careless[0].nested.userGuess, '[redacted]')
  t.notMatch(logs.text, /042917/, 'no OTP code or guess in any line')
})

t.test('request lines carry the trace id of an incoming traceparent and the sidecar\'s x-request-id', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app, logs } = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: '127.0.0.1/32' })
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
  const meshId = 'c0ffee00-1234-4abc-8def-0123456789ab'
  const answer = await app.inject({
    method: 'POST',
    url: '/otp/request',
    headers: { ...bearer(keys.acmeTest), traceparent: `00-${traceId}-00f067aa0ba902b7-01`, 'x-request-id': meshId },
    payload: { email: 'someone@example.com' }
  })
  t.equal(answer.statusCode, 200)
  t.equal(answer.headers['x-request-id'], meshId, 'the answer names the sidecar\'s id')
  const lines = logs.lines.map((line) => JSON.parse(line)).filter((line) => line.reqId === meshId)
  t.ok(lines.length >= 2, 'the request\'s lines are filed under the sidecar\'s id')
  t.ok(lines.some((line) => line.msg === 'incoming request') && lines.some((line) => line.msg === 'request completed'), 'from the first line to the last')
  t.ok(lines.every((line) => line.traceId === traceId), 'every one carries the trace id')

  for (const [what, requestId] of [['too long', 'a'.repeat(129)], ['a space', 'a b'], ['a quote', 'a"b'], ['a non-ASCII character', 'réq']] as const) {
    const other = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': requestId, traceparent: `00-${'0'.repeat(32)}-00f067aa0ba902b7-01` } })
    t.match(String(other.headers['x-request-id']), /^[0-9a-f-]{36}$/, `an id with ${what} is replaced by our own`)
  }
  const invalidTrace = logs.lines.map((line) => JSON.parse(line)).filter((line) => line.msg === 'incoming request' && line.req?.url === '/healthz')
  t.ok(invalidTrace.length > 0 && invalidTrace.every((line) => line.traceId === undefined), 'an all-zero trace id is no trace id')
})

t.test('x-request-id from a peer outside TRUST_PROXY is ignored', async (t) => {
  const { app, logs } = await buildApp(t)
  const answer = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'forged-by-the-caller' } })
  t.match(String(answer.headers['x-request-id']), /^[0-9a-f-]{36}$/)
  t.notMatch(logs.text, /forged-by-the-caller/, 'the caller\'s choice never reaches the logs')
})
