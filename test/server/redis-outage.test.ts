import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, writeTenants, assertStartsUnavailable } from '../helper.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

t.test('Redis outage: 503 fast, not ready, then recovery without a restart', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const { app, mail } = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })
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
  t.ok(Date.now() - started < 1000, 'answered within a second')
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
  let recovered = 0
  for (let i = 0; i < 60 && recovered !== 200; i++) {
    await sleep(100)
    recovered = (await dispatch()).statusCode
  }
  t.equal(recovered, 200, 'dispatch works again')
  const requestId = (await dispatch()).json().data.requestId
  t.equal((await verify(requestId, mail.codeFor('ivy@example.com'))).statusCode, 200, 'verify works again')
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200)
})

t.test('start-up with Redis down: the service starts, is not ready, answers 503', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  await redis.stop()
  await assertStartsUnavailable(t, { REDIS_URL: redis.url })
})
