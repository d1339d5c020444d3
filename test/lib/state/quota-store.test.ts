import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { MemoryQuotaStore } from '../../../lib/state/memory/quota-store.js'
import type { QuotaStore } from '../../../lib/state/quota.js'
import { quotaKey } from '../../../lib/state/keys.js'
import { RedisQuotaStore } from '../../../lib/state/redis/quota-store.js'
import { currentWindow, parseWindow, type QuotaWindow } from '../../../lib/limits/window.js'
import { redisTestOptions, startRedis, connectFailFast } from '../../support/redis.js'

function window (spec: string): QuotaWindow {
  const parsed = parseWindow(spec)
  if (parsed === null) throw new Error(`test setup: ${spec} should parse`)
  return parsed
}

const hour = window('1h')
const minute = window('1m')

let scopes = 0
/** A scope no other test touches, so tests sharing one Redis cannot see each other's counts. */
function freshScope (): string {
  return `tenant${++scopes}-${process.pid}:live`
}

/**
 * The behaviour every QuotaStore must have. Times are real (the Redis store expires counters
 * from them) but chosen by the test: window starts, so "later in the same window" is exact.
 */
function quotaStoreSuite (t: Test, store: () => QuotaStore): void {
  t.test('exactly `limit` of 100 concurrent reservations succeed', async (t) => {
    const quota = store()
    const scope = freshScope()
    const now = Date.now()
    const { id, resetMs } = currentWindow(hour, now)
    t.strictSame(await quota.usage(scope, hour, now), { used: 0, resetMs, windowId: id }, 'empty before')

    const decisions = await Promise.all(Array.from({ length: 100 }, async () => await quota.reserve(scope, 10, hour, now)))
    const allowed = decisions.filter((decision) => decision.allowed)
    const refused = decisions.filter((decision) => !decision.allowed)
    t.equal(allowed.length, 10, 'allowed')
    t.equal(refused.length, 90, 'refused')
    t.strictSame(allowed.map((decision) => decision.used).sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
      'each grant saw a distinct count')
    for (const decision of allowed) {
      t.equal(decision.remaining, 10 - decision.used, 'remaining matches used')
    }
    t.ok(refused.every((decision) => decision.used === 10 && decision.remaining === 0), 'refusals report the full count')
    t.ok(decisions.every((decision) => decision.resetMs === resetMs && decision.windowId === id), 'same window for all')

    t.strictSame(await quota.usage(scope, hour, now), { used: 10, resetMs, windowId: id }, 'refusals did not count')
    t.strictSame(await quota.reserve(scope, 10, hour, now),
      { allowed: false, used: 10, remaining: 0, resetMs, windowId: id }, 'still refused afterwards')
  })

  t.test('used, remaining and resetMs step by one', async (t) => {
    const quota = store()
    const scope = freshScope()
    const now = Date.now()
    const { id, resetMs } = currentWindow(hour, now)
    t.strictSame(await quota.reserve(scope, 3, hour, now), { allowed: true, used: 1, remaining: 2, resetMs, windowId: id })
    t.strictSame(await quota.reserve(scope, 3, hour, now), { allowed: true, used: 2, remaining: 1, resetMs, windowId: id })
    t.strictSame(await quota.reserve(scope, 3, hour, now), { allowed: true, used: 3, remaining: 0, resetMs, windowId: id })
    t.strictSame(await quota.reserve(scope, 3, hour, now), { allowed: false, used: 3, remaining: 0, resetMs, windowId: id })
  })

  t.test('a limit of zero refuses everything', async (t) => {
    const quota = store()
    const scope = freshScope()
    const decision = await quota.reserve(scope, 0, hour, Date.now())
    t.equal(decision.allowed, false)
    t.equal(decision.used, 0)
    t.equal(decision.remaining, 0)
  })

  t.test('refund gives a unit back, never below zero', async (t) => {
    const quota = store()
    const scope = freshScope()
    const now = Date.now()
    const first = await quota.reserve(scope, 2, hour, now)
    await quota.reserve(scope, 2, hour, now)
    t.equal((await quota.reserve(scope, 2, hour, now)).allowed, false, 'limit reached')

    await quota.refund(scope, first.windowId)
    t.equal((await quota.usage(scope, hour, now)).used, 1, 'one unit returned')
    const again = await quota.reserve(scope, 2, hour, now)
    t.equal(again.allowed, true, 'the refunded unit can be used again')
    t.equal(again.used, 2)

    for (let i = 0; i < 5; i++) await quota.refund(scope, first.windowId)
    t.equal((await quota.usage(scope, hour, now)).used, 0, 'floored at zero')
    const after = await quota.reserve(scope, 2, hour, now)
    t.equal(after.used, 1, 'extra refunds did not bank credit')
    t.equal(after.remaining, 1)
  })

  t.test('refund of a window never used is a no-op', async (t) => {
    const quota = store()
    const scope = freshScope()
    const now = Date.now()
    await quota.refund(scope, currentWindow(hour, now).id)
    t.equal((await quota.usage(scope, hour, now)).used, 0)
    t.equal((await quota.reserve(scope, 1, hour, now)).used, 1)
  })

  t.test('the allowance returns when the window rolls over', async (t) => {
    const quota = store()
    const scope = freshScope()
    const start = currentWindow(minute, Date.now()).startMs
    for (let i = 0; i < 3; i++) t.equal((await quota.reserve(scope, 3, minute, start + i * 1000)).allowed, true)
    const refused = await quota.reserve(scope, 3, minute, start + 59_999)
    t.equal(refused.allowed, false, 'full until the last millisecond')
    t.equal(refused.resetMs, start + 60_000)

    const next = await quota.reserve(scope, 3, minute, refused.resetMs)
    t.strictSame(next, {
      allowed: true, used: 1, remaining: 2, resetMs: start + 120_000, windowId: currentWindow(minute, start + 60_000).id
    })
    t.not(next.windowId, refused.windowId)

    // A refund for the old window (e.g. a send that failed across the boundary) must not
    // hand the new window an extra unit.
    await quota.refund(scope, refused.windowId)
    t.equal((await quota.usage(scope, minute, start + 60_000)).used, 1, 'old-window refund left the new count alone')
  })

  t.test('raising the limit mid-window keeps the count', async (t) => {
    const quota = store()
    const scope = freshScope()
    const now = Date.now()
    for (let i = 0; i < 5; i++) await quota.reserve(scope, 5, hour, now)
    t.equal((await quota.reserve(scope, 5, hour, now)).allowed, false)

    const raised = await quota.reserve(scope, 8, hour, now)
    t.equal(raised.allowed, true)
    t.equal(raised.used, 6, 'counting continued from 5')
    t.equal(raised.remaining, 2)

    const lowered = await quota.reserve(scope, 3, hour, now)
    t.equal(lowered.allowed, false, 'a lower limit below the count refuses')
    t.equal(lowered.used, 6)
    t.equal(lowered.remaining, 0, 'remaining never negative')
  })

  t.test('scopes and windows are counted separately', async (t) => {
    const quota = store()
    const live = freshScope()
    const test = `${live}-test`
    const now = Date.now()
    const month = window('month')
    await quota.reserve(live, 1, hour, now)
    t.equal((await quota.reserve(live, 1, hour, now)).allowed, false)
    t.equal((await quota.reserve(test, 1, hour, now)).allowed, true, 'another scope has its own count')
    t.equal((await quota.reserve(live, 1, month, now)).allowed, true, 'another window spec has its own count')
    t.equal((await quota.usage(live, hour, now)).used, 1)
  })

  t.test('invalid arguments are rejected', async (t) => {
    const quota = store()
    const now = Date.now()
    await t.rejects(quota.reserve(freshScope(), -1, hour, now), RangeError)
    await t.rejects(quota.reserve(freshScope(), 1.5, hour, now), RangeError)
    await t.rejects(quota.reserve(freshScope(), Number.NaN, hour, now), RangeError)
    await t.rejects(quota.reserve('', 1, hour, now), RangeError)
  })
}

t.test('MemoryQuotaStore', async (t) => {
  quotaStoreSuite(t, () => new MemoryQuotaStore())

  t.test('counters of ended windows are dropped', async (t) => {
    const quota = new MemoryQuotaStore()
    const start = currentWindow(minute, Date.now()).startMs
    for (let i = 0; i < 30; i++) {
      const at = start + i * 60_000
      await quota.reserve('acme:live', 5, minute, at)
      await quota.reserve('acme:test', 5, minute, at)
    }
    // Two scopes, and at most a minute's worth of ended windows awaiting the sweep.
    t.ok(quota.size <= 4, `size ${quota.size}`)
  })
})

t.test('RedisQuotaStore', redisTestOptions(), async (t) => {
  const server = await startRedis()
  const clients: Redis[] = []
  t.teardown(async () => {
    for (const client of clients) client.disconnect()
    await server.stop()
  })
  const client = await connectFailFast(server.url)
  const other = await connectFailFast(server.url)
  clients.push(client, other)

  quotaStoreSuite(t, () => new RedisQuotaStore(client))

  t.test('counters expire after the window (plus grace) under their name and hash tag', async (t) => {
    const quota = new RedisQuotaStore(client)
    const scope = freshScope()
    const now = Date.now()
    const decision = await quota.reserve(scope, 5, hour, now)
    const key = `quota:{${scope}}:${decision.windowId}`
    t.equal(key, quotaKey(scope, null, decision.windowId))
    t.equal(await client.get(key), '1')
    // PTTL rather than PEXPIRETIME, which needs Redis 7.
    const expireAt = Date.now() + await client.pttl(key)
    t.ok(expireAt > decision.resetMs && expireAt <= decision.resetMs + 10 * 60_000,
      `expires at ${expireAt}, reset ${decision.resetMs}`)
  })

  t.test('a refund of an expired window does not recreate its counter', async (t) => {
    const quota = new RedisQuotaStore(client)
    const scope = freshScope()
    const { windowId } = await quota.reserve(scope, 5, hour, Date.now())
    const key = `quota:{${scope}}:${windowId}`
    await client.del(key)
    await quota.refund(scope, windowId)
    t.equal(await client.exists(key), 0)
  })

  t.test('two instances on one server share the count exactly', async (t) => {
    const first = new RedisQuotaStore(client)
    const second = new RedisQuotaStore(other)
    const scope = freshScope()
    const now = Date.now()
    const decisions = await Promise.all(Array.from({ length: 100 }, async (_, i) =>
      await (i % 2 === 0 ? first : second).reserve(scope, 10, hour, now)))
    t.equal(decisions.filter((decision) => decision.allowed).length, 10)
    t.equal(decisions.filter((decision) => !decision.allowed).length, 90)
    t.equal((await second.usage(scope, hour, now)).used, 10)
    t.equal((await first.usage(scope, hour, now)).used, 10)
  })

  t.test('with Redis down, reserve rejects promptly instead of hanging', async (t) => {
    const quota = new RedisQuotaStore(client)
    const scope = freshScope()
    await quota.reserve(scope, 5, hour, Date.now())
    await server.stop()
    const started = performance.now()
    await t.rejects(quota.reserve(scope, 5, hour, Date.now()))
    await t.rejects(quota.refund(scope, currentWindow(hour, Date.now()).id))
    await t.rejects(quota.usage(scope, hour, Date.now()))
    const elapsed = performance.now() - started
    t.ok(elapsed < 2000, `rejected in ${Math.round(elapsed)} ms`)
  })
})
