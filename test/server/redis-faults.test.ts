import t from 'tap'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { FaultLoad } from '../support/faults.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
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

t.test('Redis at its memory limit: a dispatch is done whole or not at all, and readiness says so', redisTestOptions(), async (t) => {
  const redis = await startRedis(['--maxmemory-policy', 'noeviction'])
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t, (file) => { file.tiers = { standard: { allowance: 100_000, window: '1d', sandboxAllowance: 100_000 } } })
  const app = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })
  await until('the app connected to Redis', () => app.app.redis?.status === 'ready')
  const admin = await connectFailFast(redis.url)
  t.teardown(() => { admin.disconnect() })
  const live = new FaultLoad(app, keys.acmeLive, 'live')
  const sandbox = new FaultLoad(app, keys.acmeTest, 'test')
  for (let i = 0; i < 5; i++) await Promise.all([live.dispatch(), sandbox.dispatch()])

  // The limit swept from the memory in use to some 40 kB above it, so that requests meet it
  // before, inside and after their writes (a burst of requests takes tens of kB of client
  // buffers: most dispatches of a step are refused whole, the sandbox inbox write after an
  // admitted dispatch some of the time).
  for (let headroom = 0; headroom <= 40_000; headroom += 1000) {
    await admin.config('SET', 'maxmemory', '0')
    const used = Number(/^used_memory:(\d+)/m.exec(await admin.info('memory'))?.[1])
    await admin.config('SET', 'maxmemory', String(used + headroom))
    await Promise.all([
      ...Array.from({ length: 3 }, async () => await live.dispatch()),
      ...Array.from({ length: 3 }, async () => await sandbox.dispatch()),
      ...live.takeOutstanding(2).map(async (issued) => await live.verify(issued))
    ])
  }
  // One sandbox dispatch at a time, the limit closer together: its inbox write takes more
  // memory than its admission, so some are admitted and then refused at the inbox write.
  for (let headroom = 0; headroom <= 40_000; headroom += 250) {
    await admin.config('SET', 'maxmemory', '0')
    const used = Number(/^used_memory:(\d+)/m.exec(await admin.info('memory'))?.[1])
    await admin.config('SET', 'maxmemory', String(used + headroom))
    await sandbox.dispatch()
  }
  const statuses = new Map([...live.statuses, ...[...sandbox.statuses].map(([name, count]) => [`sandbox ${name}`, count] as const)])
  t.comment(JSON.stringify(Object.fromEntries(statuses)))
  t.same([...statuses.keys()].filter((name) => !/ (200|503)$/.test(name)), [], 'every answer is 200 or 503')
  t.ok((statuses.get('dispatch 503') ?? 0) > 0 && (statuses.get('sandbox dispatch 503') ?? 0) > 0, 'the sweep reached the limit')
  const undone = app.logs.lines.filter((line) => line.includes('sandbox inbox write failed: OOM')).length
  t.ok(undone > 0, `and met it at the sandbox inbox write after an admitted dispatch (${undone} times)`)

  await admin.config('SET', 'maxmemory', '1')
  await until('readiness reporting the full Redis', async () => (await readiness(app.app)).status === 503)
  t.match((await readiness(app.app)).body.checks.tokenStore.reason, /maxmemory/)
  await admin.config('SET', 'maxmemory', '0')
  await live.check(t, redis.url)
  await sandbox.check(t, redis.url)
})

t.test('a frozen Redis costs an account route one timeout: its rate-limit count spends the request\'s budget, and the route does not wait again', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const app = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_COMMAND_TIMEOUT_MS: String(TIMEOUT_MS) })
  await until('the app connected to Redis', () => app.app.redis?.status === 'ready')
  t.equal((await app.app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).statusCode, 200, 'usage answers while Redis does')

  redis.freeze()
  let thawed = false
  t.teardown(() => { if (!thawed) redis.thaw() })
  const usage = await app.app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })
  redis.thaw()
  thawed = true
  t.same([usage.statusCode, usage.json().code], [503, 'UNAVAILABLE'], 'usage answers 503 while Redis is frozen')
  const budgetSpent = app.logs.lines.filter((line) => line.includes('not tried: the store did not answer in time earlier in this request'))
  t.ok(budgetSpent.length > 0, 'the route\'s own store call was not tried: the rate-limit count had spent the request\'s one timeout')
})
