import { writeFileSync } from 'node:fs'
import { mock } from 'node:test'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { MemoryIdempotencyStore } from '../../lib/state/memory/idempotency-store.js'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

type Env = () => Record<string, string>

/** Idempotency records held, wherever the backend keeps them. */
async function storedRecords (app: Awaited<ReturnType<typeof buildApp>>['app']): Promise<number> {
  const { idempotency } = app.state
  if (idempotency instanceof MemoryIdempotencyStore) return idempotency.size
  return (await app.redis?.keys('idem:*'))?.length ?? 0
}

function dispatch (app: Awaited<ReturnType<typeof buildApp>>['app'], key: string, email: string, headers: Record<string, string> = {}) {
  return app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(key), ...headers }, payload: { email } })
}

function quotaSuite (t: Test, env: Env): void {
  t.test('allowance 10, 100 parallel dispatches: exactly 10 succeed', async (t) => {
    const { path, keys } = writeTenants(t, (file) => { file.tiers.standard = { allowance: 10, window: '1d', sandboxAllowance: 3 } })
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const answers = await Promise.all(Array.from({ length: 100 }, async (_, i) => await dispatch(app, keys.acmeLive, `q${i}@example.com`)))
    t.equal(answers.filter((answer) => answer.statusCode === 200).length, 10)
    const refused = answers.filter((answer) => answer.statusCode === 402)
    t.equal(refused.length, 90)
    t.equal(mail.count, 10, 'ten mails left, no more')
    const body = refused[0]!.json()
    t.equal(body.code, 'QUOTA_EXCEEDED')
    t.match(body.message, /live allowance of tier "standard" \(10 per 1d\) is used up until \d{4}-\d\d-\d\dT/)
    t.equal(refused[0]!.headers['quota-limit'], '10')
    t.equal(refused[0]!.headers['quota-remaining'], '0')
    t.ok(Number(refused[0]!.headers['quota-reset']) > 0)

    const sandbox = await dispatch(app, keys.acmeTest, 'sandbox@example.com')
    t.equal(sandbox.statusCode, 200, 'sandbox traffic has its own allowance')
    t.equal(sandbox.headers['quota-limit'], '3')
    const usage = (await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).json().data
    t.same([usage.live.used, usage.live.remaining, usage.sandbox.used, usage.sandbox.remaining], [10, 0, 1, 2])
  })

  t.test('Quota-* headers on every dispatch; the window rolls over', async (t) => {
    const { path, keys } = writeTenants(t, (file) => { file.tiers.standard = { allowance: 2, window: '1m', sandboxAllowance: 2 } })
    const { app } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    // The service's clock is the test's (node:test's MockTimers, Date only): the window's
    // boundary is crossed on purpose, never by a slow machine. The window lies ahead of the real
    // clock, so Redis, which expires counters on its own clock, keeps them meanwhile.
    const windowStart = (Math.floor(Date.now() / 60_000) + 2) * 60_000
    mock.timers.enable({ apis: ['Date'], now: windowStart })
    try {
      const first = await dispatch(app, keys.acmeLive, 'r@example.com')
      t.same([first.statusCode, first.headers['quota-limit'], first.headers['quota-remaining'], first.headers['quota-reset']], [200, '2', '1', '60'], 'seconds until the window ends')
      mock.timers.tick(45_500)
      const second = await dispatch(app, keys.acmeLive, 'r@example.com')
      t.same([second.statusCode, second.headers['quota-remaining'], second.headers['quota-reset']], [200, '0', '15'], 'rounded up')
      const third = await dispatch(app, keys.acmeLive, 'r@example.com')
      t.same([third.statusCode, third.headers['quota-remaining'], third.headers['quota-reset']], [402, '0', '15'])
      mock.timers.tick(14_499)
      t.equal((await dispatch(app, keys.acmeLive, 'r@example.com')).statusCode, 402, 'used up until the last millisecond of the window')
      mock.timers.tick(1)
      const next = await dispatch(app, keys.acmeLive, 'r@example.com')
      t.same([next.statusCode, next.headers['quota-remaining'], next.headers['quota-reset']], [200, '1', '60'], 'the allowance returned with the new window')
    } finally {
      mock.timers.reset()
    }
  })

  t.test('a failed delivery refunds its unit; verify, 4xx refusals are not charged', async (t) => {
    const { path, keys } = writeTenants(t, (file) => { file.tiers.standard = { allowance: 5, window: '1d', sandboxAllowance: 1 } })
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const failed = await dispatch(app, keys.acmeTest, 'fail@simulator.invalid')
    t.same([failed.statusCode, failed.headers['quota-limit'], failed.headers['quota-remaining']], [502, '1', '1'], 'its Quota-* headers tell the state after the refund')
    t.equal((await dispatch(app, keys.acmeTest, 'fail@simulator.invalid')).statusCode, 502)
    const ok = await dispatch(app, keys.acmeTest, 'sam@example.com')
    t.equal(ok.statusCode, 200, 'the sandbox allowance of 1 is still there after two failures')
    t.equal((await dispatch(app, keys.acmeTest, 'sam@example.com')).statusCode, 402)

    await dispatch(app, keys.acmeLive, 'bad@@example.com')
    await dispatch(app, keys.acmeBrowser, 'sam@example.com')
    const sent = await dispatch(app, keys.acmeLive, 'sam@example.com')
    await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: sent.json().data.requestId, userGuess: mail.codeFor('sam@example.com') } })
    const usage = (await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).json().data
    t.equal(usage.live.used, 1, 'only the one mail that left is charged')
  })

  t.test('a reload raises the allowance at once and keeps the count', async (t) => {
    const { path, keys, file } = writeTenants(t, (file) => { file.tiers.standard = { allowance: 2, window: '1d', sandboxAllowance: 1 } })
    const { app } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    await dispatch(app, keys.acmeLive, 'u@example.com')
    await dispatch(app, keys.acmeLive, 'u@example.com')
    t.equal((await dispatch(app, keys.acmeLive, 'u@example.com')).statusCode, 402)
    file.tiers.standard!.allowance = 3
    writeFileSync(path, JSON.stringify(file))
    t.same(await app.tenants.reload(), { ok: true, tenants: 2 })
    const after = await dispatch(app, keys.acmeLive, 'u@example.com')
    t.same([after.statusCode, after.headers['quota-remaining']], [200, '0'], 'one more, the count of 2 kept')
    t.equal((await dispatch(app, keys.acmeLive, 'u@example.com')).statusCode, 402)
  })

  t.test('per-tenant quota override', async (t) => {
    const { path, keys } = writeTenants(t, (file) => { file.tenants[0]!.quota = { allowance: 1 } })
    const { app } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    t.equal((await dispatch(app, keys.acmeLive, 'v@example.com')).headers['quota-limit'], '1')
  })

  t.test('Idempotency-Key: replay, mismatch, concurrency', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const key = { 'idempotency-key': 'order-42' }
    const first = await dispatch(app, keys.acmeLive, 'w@example.com', key)
    const again = await dispatch(app, keys.acmeLive, 'w@example.com', key)
    t.equal(first.statusCode, 200)
    t.equal(again.statusCode, 200)
    t.equal(again.json().data.requestId, first.json().data.requestId, 'the same requestId')
    t.equal(again.headers['idempotent-replayed'], 'true')
    t.equal(again.headers['quota-remaining'], first.headers['quota-remaining'], 'the same quota state, no second charge')
    t.equal(mail.count, 1, 'one mail')

    const other = await dispatch(app, keys.acmeLive, 'x@example.com', key)
    t.same([other.statusCode, other.json().code], [422, 'IDEMPOTENCY_MISMATCH'])
    const otherTenant = await dispatch(app, keys.globexTest, 'x@example.com', key)
    t.equal(otherTenant.statusCode, 200, 'keys are scoped per tenant')

    const concurrent = await Promise.all(Array.from({ length: 20 }, async () => await dispatch(app, keys.acmeLive, 'y@example.com', { 'idempotency-key': 'burst' })))
    const statuses = concurrent.map((answer) => answer.statusCode)
    t.ok(statuses.every((status) => status === 200 || status === 409), 'each duplicate replays or is told to retry')
    t.equal(new Set(concurrent.filter((answer) => answer.statusCode === 200).map((answer) => answer.json().data.requestId)).size, 1, 'one requestId')
    t.equal(mail.text.split('To: y@example.com').length - 1, 1, 'one mail for 20 concurrent duplicates')
    const conflict = concurrent.find((answer) => answer.statusCode === 409)
    if (conflict !== undefined) t.same([conflict.json().code, conflict.headers['retry-after']], ['IDEMPOTENCY_IN_FLIGHT', '1'])

    const invalid = await dispatch(app, keys.acmeLive, 'z@example.com', { 'idempotency-key': 'ü'.repeat(3) })
    t.equal(invalid.statusCode, 400)
  })

  t.test('Idempotency-Key: scoped per API key; only admitted dispatches are kept', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const page = { origin: 'https://app.acme.test' }
    const backend = await dispatch(app, keys.acmeLive, 'owner@example.com', { 'idempotency-key': 'order-7' })
    t.equal(backend.statusCode, 200)
    const fromPage = await dispatch(app, keys.acmeBrowser, 'owner@example.com', { ...page, 'idempotency-key': 'order-7' })
    t.equal(fromPage.statusCode, 200, 'the public key runs its own dispatch')
    t.notOk(fromPage.headers['idempotent-replayed'], 'it cannot replay the backend\'s answer')
    t.not(fromPage.json().data.requestId, backend.json().data.requestId, 'nor learn its requestId')

    const seeded = await dispatch(app, keys.acmeBrowser, 'bait@example.com', { ...page, 'idempotency-key': 'order-8' })
    t.equal(seeded.statusCode, 200)
    const owner = await dispatch(app, keys.acmeLive, 'real@example.com', { 'idempotency-key': 'order-8' })
    t.equal(owner.statusCode, 200, 'a key the page used first does not lock the backend out')

    const refused = await dispatch(app, keys.acmeLive, 'not an address', { 'idempotency-key': 'retry-me' })
    t.equal(refused.statusCode, 400)
    const retried = await dispatch(app, keys.acmeLive, 'fixed@example.com', { 'idempotency-key': 'retry-me' })
    t.equal(retried.statusCode, 200, 'a refusal kept nothing: the corrected retry runs')

    const before = await storedRecords(app)
    for (let i = 0; i < 50; i++) await dispatch(app, keys.acmeLive, `bad${i}@mailinator.com`, { 'idempotency-key': `junk-${i}` })
    t.equal(await storedRecords(app), before, '50 refused dispatches with fresh keys store nothing')
  })

  t.test('/usage needs a secret key', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const restricted = await app.inject({ method: 'GET', url: '/usage', headers: { ...bearer(keys.acmeBrowser), origin: 'https://app.acme.test' } })
    t.same([restricted.statusCode, restricted.json().code], [403, 'KEY_NOT_PERMITTED'])
    const usage = await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })
    t.equal(usage.statusCode, 200)
    t.match(usage.json().data, { tenant: 'acme', tier: 'standard', live: { limit: 1000, window: '1d' }, sandbox: { limit: 100 } })
  })
}

// 94 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('memory', async (t) => { quotaSuite(t, () => ({})) })

t.test('redis', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  // Every test uses the same tenant ids: each starts from an empty Redis.
  t.beforeEach(async () => { await client.flushall() })
  const env = (): Record<string, string> => ({ REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  quotaSuite(t, env)

  t.test('two instances on one Redis share the allowance exactly', async (t) => {
    const { path, keys } = writeTenants(t, (file) => { file.tiers.standard = { allowance: 10, window: '1d', sandboxAllowance: 1 } })
    const a = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const b = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const answers = await Promise.all(Array.from({ length: 100 }, async (_, i) => await dispatch(i % 2 === 0 ? a.app : b.app, keys.acmeLive, `m${i}@example.com`)))
    t.equal(answers.filter((answer) => answer.statusCode === 200).length, 10)
    t.equal(answers.filter((answer) => answer.statusCode === 402).length, 90)
    t.equal(a.mail.count + b.mail.count, 10)

    const replayed = await dispatch(a.app, keys.acmeTest, 'n@example.com', { 'idempotency-key': 'shared' })
    const onB = await dispatch(b.app, keys.acmeTest, 'n@example.com', { 'idempotency-key': 'shared' })
    t.equal(onB.json().data.requestId, replayed.json().data.requestId, 'idempotency is shared too')
  })
})
