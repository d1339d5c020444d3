import t from 'tap'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, writeTenants, assertStartsUnavailable } from '../helper.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { until } from '../support/wait.js'

/** The longest command timeout the service takes: a command queued while Redis is down would wait this long. */
const COMMAND_TIMEOUT_MS = 10_000

t.test('Redis outage: 503 fast, not ready, then recovery without a restart', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const { app, mail } = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_COMMAND_TIMEOUT_MS: `${COMMAND_TIMEOUT_MS}ms` })
  const dispatch = async () => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'ivy@example.com' } })
  const verify = async (requestId: string, userGuess: string) => await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess } })

  const before = await dispatch()
  t.equal(before.statusCode, 200)
  const pendingId = before.json().data.requestId
  const pendingCode = mail.codeFor('ivy@example.com')
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200)

  await redis.stop()
  const started = Date.now()
  const [down, downVerify] = await Promise.all([dispatch(), verify(pendingId, pendingCode)])
  // Failing at once, not after a command timeout: half the longest one, so no machine's speed decides.
  t.ok(Date.now() - started < COMMAND_TIMEOUT_MS / 2, `answered in ${Date.now() - started} ms, not after the command timeout`)
  for (const answer of [down, downVerify]) {
    t.equal(answer.statusCode, 503)
    t.equal(answer.json().code, 'UNAVAILABLE')
    t.equal(answer.headers['retry-after'], '1')
  }
  const readyz = await readiness(app)
  t.equal(readyz.status, 503)
  t.equal(readyz.body.checks.tokenStore.ok, false)
  t.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200, 'still alive')

  await redis.start()
  await until('dispatch to work again', async () => (await dispatch()).statusCode === 200)
  const requestId = (await dispatch()).json().data.requestId
  t.equal((await verify(requestId, mail.codeFor('ivy@example.com'))).statusCode, 200, 'verify works again')
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200)
})

t.test('start-up with Redis down: the service starts, is not ready, answers 503', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  await redis.stop()
  await assertStartsUnavailable(t, { REDIS_URL: redis.url })
})
