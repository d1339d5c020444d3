import t from 'tap'
import { bearer, buildApp, writeTenants } from '../helper.js'

t.test('GET /metrics exposes request, outcome and rejection metrics in Prometheus format', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path, RATE_LIMIT_RECIPIENT: '1/1m' })
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'm@example.com' } })
  await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'm@example.com' } })
  await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: sent.json().data.requestId, userGuess: mail.codeFor('m@example.com') } })
  await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeTest), payload: { email: 'fail@simulator.invalid' } })
  await app.inject({ method: 'POST', url: '/otp/request', payload: { email: 'm@example.com' } })

  const answer = await app.inject({ method: 'GET', url: '/metrics' })
  t.equal(answer.statusCode, 200)
  t.match(answer.headers['content-type'], /text\/plain/)
  const text = answer.body
  t.match(text, /email_otp_http_request_duration_seconds_count\{method="POST",route="\/otp\/request",status="200"\} 1/)
  t.match(text, /email_otp_http_request_duration_seconds_bucket\{le="0\.005",method="POST",route="\/otp\/verify",status="200"\}/)
  t.match(text, /email_otp_dispatches_total\{mode="live",result="sent"\} 1/)
  t.match(text, /email_otp_dispatches_total\{mode="test",result="delivery_failed"\} 1/)
  t.match(text, /email_otp_verifications_total\{mode="live",result="verified"\} 1/)
  t.match(text, /email_otp_delivery_failures_total\{kind="rejected"\} 1/)
  t.match(text, /email_otp_errors_total\{code="RATE_LIMITED"\} 1/)
  t.match(text, /email_otp_errors_total\{code="UNAUTHORIZED"\} 1/)
  t.match(text, /email_otp_process_cpu_seconds_total/)
  t.notMatch(text, /m@example\.com/, 'no address in any label')
})

t.test('METRICS_TOKEN protects the endpoint', async (t) => {
  const token = 'metrics-token-0123456789'
  const { app } = await buildApp(t, { METRICS_TOKEN: token })
  t.equal((await app.inject({ method: 'GET', url: '/metrics' })).statusCode, 401)
  t.equal((await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: 'Bearer wrong-token-0123456789' } })).statusCode, 401)
  t.equal((await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${token}` } })).statusCode, 200)
})
