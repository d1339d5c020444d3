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
