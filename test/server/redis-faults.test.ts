import { createHash } from 'node:crypto'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { DISPATCH_LUA, RECEIPT_REDEEM_LUA, VERIFY_LUA } from '../../lib/state/redis/scripts.js'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, writeTenants, type FixtureKeys, type TestApp } from '../helper.js'
import { FaultLoad } from '../support/faults.js'
import { connectFailFast, redisTestOptions, startRedis, type RedisServer } from '../support/redis.js'
import { startHoldingProxy, type HoldingProxy } from '../support/holding-proxy.js'
import { until } from '../support/wait.js'

/**
 * REDIS_COMMAND_TIMEOUT_MS of the tests that freeze Redis: long enough that a command sent
 * before the freeze is answered in time however busy the machine (at a load of 10, a warm-up
 * dispatch took longer than 200 ms). Whatever its length, a command sent during the freeze
 * reaches Redis after its deadline, since Redis thaws only once every request has answered: a
 * long one costs only the wait for the 503s.
 */
const TIMEOUT_MS = 2000
/**
 * Behind the holding proxy a command must reach Redis before its deadline however busy the
 * machine: a held reply waits for the release whatever the timeout, so a long one costs only
 * the wait for each answer that is held.
 */
const HELD_TIMEOUT_MS = 2000

/** What ioredis sends to run a script once Redis has it: EVALSHA and this. */
const sha1 = (lua: string): string => createHash('sha1').update(lua).digest('hex')
/** What a command running the script holds: its SHA1, or the script itself (ioredis's first EVAL of it on a connection). */
const scriptMarkers = (lua: string): string[] => [sha1(lua), lua]

/**
 * Every key in Redis and its value (DUMP), so that "a command did nothing" can be checked
 * whole: counters a request's undo does not touch (velocity, lockout) included.
 */
async function snapshot (url: string): Promise<Map<string, string>> {
  const redis = new Redis(url)
  try {
    const keys: string[] = []
    for await (const batch of redis.scanStream({ count: 1000 })) keys.push(...(batch as string[]))
    const values = await Promise.all(keys.map(async (key) => [key, (await redis.dumpBuffer(key))?.toString('base64') ?? ''] as const))
    return new Map(values.sort(([a], [b]) => a.localeCompare(b)))
  } finally {
    redis.disconnect()
  }
}

/** An app on Redis through a proxy that can hold Redis's replies. */
async function behindProxy (t: Test): Promise<{ redis: RedisServer, proxy: HoldingProxy, app: TestApp, keys: FixtureKeys }> {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const proxy = await startHoldingProxy(t, redis.port)
  const { path, keys } = writeTenants(t)
  const app = await buildApp(t, { REDIS_URL: proxy.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_COMMAND_TIMEOUT_MS: String(HELD_TIMEOUT_MS) })
  // Released before the app closes, so that its connection ends in step.
  t.teardown(() => { proxy.release() })
  await until('the app connected to Redis', () => app.app.redis?.status === 'ready')
  return { redis, proxy, app, keys }
}

/**
 * The script whose reply the proxy held ran in time, rather than being refused by the fence
 * (a fence refusal is an error reply): so what the request left can only be its undo's doing.
 */
function ranInTime (t: Test, proxy: HoldingProxy): void {
  t.ok(proxy.marked && proxy.heldText.length > 0, 'Redis replied, and the reply was held')
  t.notMatch(proxy.heldText, /FENCED/, 'the script ran: no fence refused it')
}

t.test('a frozen Redis: every answer matches its effect once Redis runs what it was sent', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const app = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_COMMAND_TIMEOUT_MS: String(TIMEOUT_MS) })
  await until('the app connected to Redis', () => app.app.redis?.status === 'ready')
  const load = new FaultLoad(app, keys.acmeLive)
  for (let i = 0; i < 30; i++) t.equal(await load.dispatch(), 200)
  // The stories, funnel counts and reputation tallies those dispatches queued are written first:
  // written during the freeze, they would reach Redis after it, and be no late script's doing.
  const { state } = app.app
  await Promise.all([state.verificationLog.flush(), state.insights.flush(), state.reputation.flush()])
  const before = await snapshot(redis.url)

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

  // The app's connection runs what it sent during the freeze before this PING. The scripts
  // reached Redis after their deadline: the fence made each do nothing at all, where an undo
  // would only have taken back the code and the charge, not the velocity counts.
  await until('Redis answering the app again', async () => await app.app.redis?.ping().then(() => true, () => false) ?? false)
  t.same(Object.fromEntries(await snapshot(redis.url)), Object.fromEntries(before), 'the late scripts changed no key in Redis')
  await load.check(t, redis.url)
  t.equal(load.issued, 30, 'no dispatch answered 200 during the freeze')
})

t.test('a dispatch whose reply comes too late is undone: no code left, nothing charged', redisTestOptions(), async (t) => {
  const { redis, proxy, app, keys } = await behindProxy(t)
  const load = new FaultLoad(app, keys.acmeLive)
  t.equal(await load.dispatch(), 200, 'a dispatch with Redis answering (Redis now holds the script: it runs by EVALSHA)')

  proxy.holdRepliesFrom(sha1(DISPATCH_LUA))
  t.equal(await load.dispatch(), 503, 'the dispatch whose reply did not come in time answers 503')
  ranInTime(t, proxy)
  proxy.release()
  await load.check(t, redis.url)
})

t.test('a verify whose reply comes too late puts the code back: the right code verifies on retry', redisTestOptions(), async (t) => {
  const { redis, proxy, app, keys } = await behindProxy(t)
  const load = new FaultLoad(app, keys.acmeLive)
  for (let i = 0; i < 2; i++) t.equal(await load.dispatch(), 200)
  const [first, second] = load.takeOutstanding(2)
  if (first === undefined || second === undefined) throw new Error('two codes')
  t.equal(await load.verify(first), 200, 'a verify with Redis answering (Redis now holds the script)')

  proxy.holdRepliesFrom(sha1(VERIFY_LUA))
  t.equal(await load.verify(second), 503, 'the verify whose reply did not come in time answers 503')
  ranInTime(t, proxy)
  proxy.release()
  // Retries the verify answered 503 with the same code: 200 only if the code was put back.
  await load.check(t, redis.url)
})

t.test('Redis replying late under load: every answer matches its effect, by the undo alone', redisTestOptions(), async (t) => {
  const { redis, proxy, app, keys } = await behindProxy(t)
  const load = new FaultLoad(app, keys.acmeLive)
  for (let i = 0; i < 30; i++) t.equal(await load.dispatch(), 200)

  // Commands reach Redis at once and run before their deadline: the fence lets every one
  // through, and only the compensation can make the answers 503 true. Held from each
  // connection's first script on (see holdRepliesFromEach): holding the reply to a command
  // sent just before, as a busy machine's clock readings are, kept the scripts in the client
  // past their deadline.
  proxy.holdRepliesFromEach([...scriptMarkers(DISPATCH_LUA), ...scriptMarkers(VERIFY_LUA)])
  let sentInTime: number | null = null
  const answered = (status: number): number => {
    sentInTime ??= proxy.eachMarked
    return status
  }
  const answers = await Promise.all([
    ...Array.from({ length: 20 }, async () => answered(await load.dispatch())),
    ...load.takeOutstanding(20).map(async (issued) => answered(await load.verify(issued)))
  ])
  t.same([...new Set(answers)], [503], 'every request answered 503 while the replies were held')
  // A script that reached Redis only after a request gave up (held behind another's reply in
  // the client) would be refused by the fence after this check: so counted when the first answered.
  t.equal(sentInTime, 40, 'every script went to Redis before the first request gave up')
  t.ok(proxy.heldText.length > 0, 'Redis replied, and the replies were held')
  t.notMatch(proxy.heldText, /FENCED/, 'every script ran: no fence refused one')
  proxy.release()
  await load.check(t, redis.url)
  t.equal(load.issued, 30, 'no dispatch answered 200 while the replies were held')
})

/** A real verification's receipt. */
async function receiptOf (t: Test, { app, mail }: TestApp, key: string, email: string): Promise<string> {
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })
  t.equal(sent.statusCode, 200, 'dispatch')
  const verified = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(key), payload: { requestId: sent.json().data.requestId, userGuess: mail.codeFor(email) } })
  t.equal(verified.statusCode, 200, 'verify')
  return verified.json().data.receipt as string
}

async function redeem ({ app }: TestApp, key: string, receipt: string): Promise<[number, string]> {
  const answer = await app.inject({ method: 'POST', url: '/otp/receipts/redeem', headers: bearer(key), payload: { receipt, anyAddress: true } })
  return [answer.statusCode, answer.statusCode === 200 ? 'redeemed' : answer.json().code]
}

t.test('a receipt redemption that reaches Redis after its caller gave up does nothing: the receipt redeems on retry', redisTestOptions(), async (t) => {
  const { proxy, app, keys } = await behindProxy(t)
  const warmUp = await receiptOf(t, app, keys.acmeLive, 'ada@example.com')
  t.same(await redeem(app, keys.acmeLive, warmUp), [200, 'redeemed'], 'a redemption with Redis answering (Redis now holds the script)')
  const receipt = await receiptOf(t, app, keys.acmeLive, 'grace@example.com')

  // The redemption script itself is held (the route's rate-limit count before it is not), so
  // that it reaches Redis after its deadline, when the request has answered.
  proxy.holdCommandsFrom(sha1(RECEIPT_REDEEM_LUA))
  t.same(await redeem(app, keys.acmeLive, receipt), [503, 'UNAVAILABLE'], 'a redemption Redis does not answer in time answers 503')
  t.ok(proxy.marked, 'the redemption script was held')
  proxy.release()
  // The app's connection runs the late redemption before this PING.
  await until('Redis answering the app again', async () => await app.app.redis?.ping().then(() => true, () => false) ?? false)
  t.same(await redeem(app, keys.acmeLive, receipt), [200, 'redeemed'], 'the fence made the late redemption do nothing: the receipt redeems')
  t.same(await redeem(app, keys.acmeLive, receipt), [409, 'RECEIPT_ALREADY_REDEEMED'], 'once')
})

t.test('a receipt redemption that ran but whose reply came too late: 503, and the receipt counts as redeemed (docs/faults.md)', redisTestOptions(), async (t) => {
  const { proxy, app, keys } = await behindProxy(t)
  const warmUp = await receiptOf(t, app, keys.acmeLive, 'ada@example.com')
  t.same(await redeem(app, keys.acmeLive, warmUp), [200, 'redeemed'], 'a redemption with Redis answering (Redis now holds the script)')
  const receipt = await receiptOf(t, app, keys.acmeLive, 'grace@example.com')

  proxy.holdRepliesFrom(sha1(RECEIPT_REDEEM_LUA))
  t.same(await redeem(app, keys.acmeLive, receipt), [503, 'UNAVAILABLE'], 'the redemption whose reply did not come in time answers 503')
  ranInTime(t, proxy)
  proxy.release()
  await until('Redis answering the app again', async () => await app.app.redis?.ping().then(() => true, () => false) ?? false)
  t.same(await redeem(app, keys.acmeLive, receipt), [409, 'RECEIPT_ALREADY_REDEEMED'], 'redemptions are fenced, not compensated: the mark stayed')
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
