import t from 'tap'
import { buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { FaultLoad } from '../support/faults.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { until } from '../support/wait.js'

const TIMEOUT_MS = 200

t.test('a frozen Redis: every answer matches its effect once Redis runs what it was sent', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const app = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_COMMAND_TIMEOUT_MS: String(TIMEOUT_MS) })
  await until('the app connected to Redis', () => app.app.redis?.status === 'ready')
  const load = new FaultLoad(app, keys.acmeLive)
  for (let i = 0; i < 30; i++) t.equal(await load.dispatch(), 200)

  redis.freeze()
  let thawed = false
  t.teardown(() => { if (!thawed) redis.thaw() })
  // Dispatches, verifies with the right code and dispatches with an Idempotency-Key, all
  // written to the socket while Redis cannot answer them.
  const answers = await Promise.all([
    ...Array.from({ length: 20 }, async () => await load.dispatch()),
    ...load.takeOutstanding(20).map(async (issued) => await load.verify(issued))
  ])
  redis.thaw()
  thawed = true
  t.same([...new Set(answers)], [503], 'every request answered 503 while Redis was frozen')

  await load.check(t, redis.url)
  t.equal(load.issued, 30, 'no dispatch answered 200 during the freeze')
})
