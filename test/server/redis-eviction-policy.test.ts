import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { buildApp, TEST_HMAC_KEYS, TEST_METRICS_TOKEN } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'

/*
 * A Redis allowed to evict keys at its memory limit silently resets velocity and lockout
 * counters and deletes codes. The service reads maxmemory-policy (INFO memory) at start-up and
 * on readiness checks: anything but noeviction is not ready, with the reason for operators and
 * an error in the log.
 */
for (const policy of ['allkeys-lru', 'volatile-lru']) {
  t.test(`maxmemory-policy ${policy}: not ready, said to operators and in the log, until it is noeviction`, redisTestOptions(), async (t) => {
    const redis = await startRedis(['--maxmemory', '64mb', '--maxmemory-policy', policy])
    t.teardown(async () => { await redis.stop() })
    const { app, logs } = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
    const port = await listenApp(app)
    const readyz = async (headers: Record<string, string> = {}) => await send({ port, method: 'GET', path: '/readyz', headers })
    const operator = { authorization: `Bearer ${TEST_METRICS_TOKEN}` }

    const errors = (): string[] => logs.lines.filter((line) => line.includes('"level":50') && line.includes('maxmemory-policy'))
    t.equal(errors().length, 1, 'one error line at start-up')
    t.match(errors()[0], new RegExp(`maxmemory-policy is ${policy}: .*set it to noeviction`))
    const stranger = await readyz()
    t.same([stranger.status, stranger.body], [503, { ready: false }], 'a stranger learns only: not ready')
    const details = await readyz(operator)
    t.equal(details.status, 503)
    t.match(details.body.checks.tokenStore, { ok: false, kind: 'redis', reason: new RegExp(`maxmemory-policy is ${policy}`) })
    await readyz(operator)
    t.equal(errors().length, 1, 'an unchanged policy is logged once, not on every probe')

    const admin = await connectFailFast(redis.url)
    t.teardown(() => { admin.disconnect() })
    await admin.config('SET', 'maxmemory-policy', 'noeviction')
    // A reading stands a few seconds, so that probes stay cheap: poll until it is renewed.
    let answer = await readyz(operator)
    for (const deadline = Date.now() + 15_000; answer.status !== 200 && Date.now() < deadline;) {
      await sleep(200)
      answer = await readyz(operator)
    }
    t.same([answer.status, answer.body.checks.tokenStore], [200, { ok: true, kind: 'redis' }], 'ready once the policy is noeviction')
    t.ok(logs.lines.some((line) => line.includes('noeviction again')), 'and the change is logged')
  })
}

t.test('maxmemory-policy noeviction: ready, nothing logged', redisTestOptions(), async (t) => {
  const redis = await startRedis(['--maxmemory', '64mb', '--maxmemory-policy', 'noeviction'])
  t.teardown(async () => { await redis.stop() })
  const { app, logs } = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  const port = await listenApp(app)
  t.equal((await send({ port, method: 'GET', path: '/readyz' })).status, 200)
  t.notOk(logs.text.includes('maxmemory-policy'))
})
