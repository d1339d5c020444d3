import t, { type Test } from 'tap'
import type { AdmissionStore } from '../../../lib/state/admission.js'
import { tenantScope } from '../../../lib/keys/scope.js'
import { currentWindow } from '../../../lib/limits/window.js'
import { MemoryAdmission } from '../../../lib/state/memory/admission.js'
import { MemoryQuotaStore } from '../../../lib/state/memory/quota-store.js'
import { MemoryTokenStore } from '../../../lib/state/memory/token-store.js'
import type { QuotaStore } from '../../../lib/state/quota.js'
import { RedisAdmission } from '../../../lib/state/redis/admission.js'
import { RedisQuotaStore } from '../../../lib/state/redis/quota-store.js'
import { reserve, tokenDispatch, window, type TenantMode } from '../../support/admission.js'
import { redisTestOptions, redisWithClients } from '../../support/redis.js'

/*
 * Units are reserved by an admitted dispatch, through the admission port, as the service does
 * (with the token, in one step); the quota port gives them back and reads the counts.
 */

const hour = window('1h')
const minute = window('1m')

let tenants = 0
/** A tenant no other test touches, so tests sharing one Redis cannot see each other's counts. */
function freshTenant (): TenantMode {
  return { tenantId: `tenant${++tenants}-${process.pid}`, mode: 'live' }
}

function scopeOf ({ tenantId, mode }: TenantMode): string {
  return tenantScope(tenantId, mode)
}

interface Adapter {
  admission: AdmissionStore
  quota: QuotaStore
}

/**
 * The behaviour both adapters have. Times are real (Redis expires counters from them) but
 * chosen by the test: window starts, so "later in the same window" is exact.
 */
function quotaStoreSuite (t: Test, make: (t: Test) => Adapter): void {
  t.test('exactly `limit` of 100 concurrent reservations succeed', async (t) => {
    const { admission, quota } = make(t)
    const tenant = freshTenant()
    const scope = scopeOf(tenant)
    const now = Date.now()
    const { id, resetMs } = currentWindow(hour, now)
    t.strictSame(await quota.usage(scope, hour, now), { used: 0, resetMs, windowId: id }, 'empty before')

    const decisions = await Promise.all(Array.from({ length: 100 }, async () => await reserve(admission, tenant, { limit: 10, window: hour, nowMs: now })))
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
    t.strictSame(await reserve(admission, tenant, { limit: 10, window: hour, nowMs: now }),
      { allowed: false, used: 10, remaining: 0, resetMs, windowId: id }, 'still refused afterwards')
  })

  t.test('used, remaining and resetMs step by one', async (t) => {
    const { admission } = make(t)
    const tenant = freshTenant()
    const now = Date.now()
    const { id, resetMs } = currentWindow(hour, now)
    const terms = { limit: 3, window: hour, nowMs: now }
    t.strictSame(await reserve(admission, tenant, terms), { allowed: true, used: 1, remaining: 2, resetMs, windowId: id })
    t.strictSame(await reserve(admission, tenant, terms), { allowed: true, used: 2, remaining: 1, resetMs, windowId: id })
    t.strictSame(await reserve(admission, tenant, terms), { allowed: true, used: 3, remaining: 0, resetMs, windowId: id })
    t.strictSame(await reserve(admission, tenant, terms), { allowed: false, used: 3, remaining: 0, resetMs, windowId: id })
  })

  t.test('a limit of zero refuses everything', async (t) => {
    const { admission } = make(t)
    const decision = await reserve(admission, freshTenant(), { limit: 0, window: hour, nowMs: Date.now() })
    t.equal(decision.allowed, false)
    t.equal(decision.used, 0)
    t.equal(decision.remaining, 0)
  })

  t.test('refund gives a unit back, never below zero', async (t) => {
    const { admission, quota } = make(t)
    const tenant = freshTenant()
    const scope = scopeOf(tenant)
    const now = Date.now()
    const terms = { limit: 2, window: hour, nowMs: now }
    const first = await reserve(admission, tenant, terms)
    await reserve(admission, tenant, terms)
    t.equal((await reserve(admission, tenant, terms)).allowed, false, 'limit reached')

    await quota.refund(scope, first.windowId)
    t.equal((await quota.usage(scope, hour, now)).used, 1, 'one unit returned')
    const again = await reserve(admission, tenant, terms)
    t.equal(again.allowed, true, 'the refunded unit can be used again')
    t.equal(again.used, 2)

    for (let i = 0; i < 5; i++) await quota.refund(scope, first.windowId)
    t.equal((await quota.usage(scope, hour, now)).used, 0, 'floored at zero')
    const after = await reserve(admission, tenant, terms)
    t.equal(after.used, 1, 'extra refunds did not bank credit')
    t.equal(after.remaining, 1)
  })

  t.test('refund of a window never used is a no-op', async (t) => {
    const { admission, quota } = make(t)
    const tenant = freshTenant()
    const now = Date.now()
    await quota.refund(scopeOf(tenant), currentWindow(hour, now).id)
    t.equal((await quota.usage(scopeOf(tenant), hour, now)).used, 0)
    t.equal((await reserve(admission, tenant, { limit: 1, window: hour, nowMs: now })).used, 1)
  })

  t.test('the allowance returns when the window rolls over', async (t) => {
    const { admission, quota } = make(t)
    const tenant = freshTenant()
    const start = currentWindow(minute, Date.now()).startMs
    const at = (nowMs: number): { limit: number, window: typeof minute, nowMs: number } => ({ limit: 3, window: minute, nowMs })
    for (let i = 0; i < 3; i++) t.equal((await reserve(admission, tenant, at(start + i * 1000))).allowed, true)
    const refused = await reserve(admission, tenant, at(start + 59_999))
    t.equal(refused.allowed, false, 'full until the last millisecond')
    t.equal(refused.resetMs, start + 60_000)

    const next = await reserve(admission, tenant, at(refused.resetMs))
    t.strictSame(next, {
      allowed: true, used: 1, remaining: 2, resetMs: start + 120_000, windowId: currentWindow(minute, start + 60_000).id
    })
    t.not(next.windowId, refused.windowId)

    // A refund for the old window (e.g. a send that failed across the boundary) must not
    // hand the new window an extra unit.
    await quota.refund(scopeOf(tenant), refused.windowId)
    t.equal((await quota.usage(scopeOf(tenant), minute, start + 60_000)).used, 1, 'old-window refund left the new count alone')
  })

  t.test('raising the limit mid-window keeps the count', async (t) => {
    const { admission } = make(t)
    const tenant = freshTenant()
    const now = Date.now()
    const limit = (value: number): { limit: number, window: typeof hour, nowMs: number } => ({ limit: value, window: hour, nowMs: now })
    for (let i = 0; i < 5; i++) await reserve(admission, tenant, limit(5))
    t.equal((await reserve(admission, tenant, limit(5))).allowed, false)

    const raised = await reserve(admission, tenant, limit(8))
    t.equal(raised.allowed, true)
    t.equal(raised.used, 6, 'counting continued from 5')
    t.equal(raised.remaining, 2)

    const lowered = await reserve(admission, tenant, limit(3))
    t.equal(lowered.allowed, false, 'a lower limit below the count refuses')
    t.equal(lowered.used, 6)
    t.equal(lowered.remaining, 0, 'remaining never negative')
  })

  t.test('scopes, windows and shares are counted separately', async (t) => {
    const { admission, quota } = make(t)
    const live = freshTenant()
    const sandbox: TenantMode = { ...live, mode: 'test' }
    const now = Date.now()
    const month = window('month')
    await reserve(admission, live, { limit: 1, window: hour, nowMs: now })
    t.equal((await reserve(admission, live, { limit: 1, window: hour, nowMs: now })).allowed, false)
    t.equal((await reserve(admission, sandbox, { limit: 1, window: hour, nowMs: now })).allowed, true, 'another scope has its own count')
    t.equal((await reserve(admission, live, { limit: 1, window: month, nowMs: now })).allowed, true, 'another window spec has its own count')
    t.equal((await quota.usage(scopeOf(live), hour, now)).used, 1)

    // A restricted key's share: a unit of the share and of the tenant's allowance, or of neither.
    const shared = freshTenant()
    const scope = scopeOf(shared)
    const withShare = (keyId: string, limit: number): { limit: number, window: typeof hour, nowMs: number, share: { keyId: string, limit: number } } => ({ limit: 10, window: hour, nowMs: now, share: { keyId, limit } })
    t.equal((await reserve(admission, shared, withShare('rk1', 2))).allowed, true)
    t.equal((await reserve(admission, shared, withShare('rk1', 2))).allowed, true)
    const full = await reserve(admission, shared, withShare('rk1', 2))
    t.equal(full.allowed, false, 'the share is used up')
    t.equal(full.used, 2, 'the decision describes the tenant\'s counter')
    t.equal((await reserve(admission, shared, withShare('rk2', 2))).allowed, true, 'another key\'s share has its own count')
    t.equal((await quota.usage(scope, hour, now, 'rk1')).used, 2)
    t.equal((await quota.usage(scope, hour, now, 'rk2')).used, 1)
    t.equal((await quota.usage(scope, hour, now)).used, 3, 'the tenant counted every granted unit, not the refused one')
    await quota.refund(scope, full.windowId, 'rk1')
    t.equal((await quota.usage(scope, hour, now, 'rk1')).used, 1, 'a share\'s refund gives back its own unit')
    t.equal((await quota.usage(scope, hour, now)).used, 3, 'and leaves the tenant\'s alone')
  })

  t.test('invalid arguments are rejected', async (t) => {
    const { admission } = make(t)
    const now = Date.now()
    await t.rejects(reserve(admission, freshTenant(), { limit: -1, window: hour, nowMs: now }), RangeError)
    await t.rejects(reserve(admission, freshTenant(), { limit: 1.5, window: hour, nowMs: now }), RangeError)
    await t.rejects(reserve(admission, freshTenant(), { limit: Number.NaN, window: hour, nowMs: now }), RangeError)
    await t.rejects(reserve(admission, freshTenant(), { limit: 10, window: hour, nowMs: now, share: { keyId: 'rk1', limit: Number.NaN } }), RangeError)
    const plan = tokenDispatch(freshTenant(), 'no-scope')
    await t.rejects(admission.dispatch({ ...plan, quota: { ...plan.quota, tenant: { ...plan.quota.tenant, scope: '' } } }), RangeError)
  })
}

t.test('in process', async (t) => {
  quotaStoreSuite(t, (t) => {
    const tokens = new MemoryTokenStore({ maxTokensPerScope: 1000 })
    t.teardown(async () => { await tokens.close() })
    const quota = new MemoryQuotaStore()
    return { admission: new MemoryAdmission(tokens, quota), quota }
  })

  t.test('counters of ended windows are dropped', async (t) => {
    const quota = new MemoryQuotaStore()
    const start = currentWindow(minute, Date.now()).startMs
    for (let i = 0; i < 30; i++) {
      const at = start + i * 60_000
      quota.reserveAll([{ scope: 'acme:live', share: null, limit: 5, window: minute }], at)
      quota.reserveAll([{ scope: 'acme:test', share: null, limit: 5, window: minute }], at)
    }
    // Two scopes, and at most a minute's worth of ended windows awaiting the sweep.
    t.ok(quota.size <= 4, `size ${quota.size}`)
  })
})

t.test('on Redis', redisTestOptions(), async (t) => {
  const { server, client, other } = await redisWithClients(t)

  quotaStoreSuite(t, () => ({ admission: new RedisAdmission(client), quota: new RedisQuotaStore(client) }))

  t.test('counters expire after the window (plus grace) under their name and hash tag', async (t) => {
    const tenant = freshTenant()
    const now = Date.now()
    const decision = await reserve(new RedisAdmission(client), tenant, { limit: 5, window: hour, nowMs: now })
    const key = `quota:{${scopeOf(tenant)}}:${decision.windowId}`
    t.equal(await client.get(key), '1')
    // PTTL rather than PEXPIRETIME, which needs Redis 7.
    const expireAt = Date.now() + await client.pttl(key)
    t.ok(expireAt > decision.resetMs && expireAt <= decision.resetMs + 10 * 60_000,
      `expires at ${expireAt}, reset ${decision.resetMs}`)
  })

  t.test('a refund of an expired window does not recreate its counter', async (t) => {
    const tenant = freshTenant()
    const { windowId } = await reserve(new RedisAdmission(client), tenant, { limit: 5, window: hour, nowMs: Date.now() })
    const key = `quota:{${scopeOf(tenant)}}:${windowId}`
    await client.del(key)
    await new RedisQuotaStore(client).refund(scopeOf(tenant), windowId)
    t.equal(await client.exists(key), 0)
  })

  t.test('two instances on one server share the count exactly', async (t) => {
    const first = new RedisAdmission(client)
    const second = new RedisAdmission(other)
    const tenant = freshTenant()
    const now = Date.now()
    const decisions = await Promise.all(Array.from({ length: 100 }, async (_, i) =>
      await reserve(i % 2 === 0 ? first : second, tenant, { limit: 10, window: hour, nowMs: now })))
    t.equal(decisions.filter((decision) => decision.allowed).length, 10)
    t.equal(decisions.filter((decision) => !decision.allowed).length, 90)
    t.equal((await new RedisQuotaStore(other).usage(scopeOf(tenant), hour, now)).used, 10)
    t.equal((await new RedisQuotaStore(client).usage(scopeOf(tenant), hour, now)).used, 10)
  })

  t.test('with Redis down, a reservation rejects promptly instead of hanging', async (t) => {
    const admission = new RedisAdmission(client)
    const quota = new RedisQuotaStore(client)
    const tenant = freshTenant()
    await reserve(admission, tenant, { limit: 5, window: hour, nowMs: Date.now() })
    await server.stop()
    const started = performance.now()
    await t.rejects(reserve(admission, tenant, { limit: 5, window: hour, nowMs: Date.now() }))
    await t.rejects(quota.refund(scopeOf(tenant), currentWindow(hour, Date.now()).id))
    await t.rejects(quota.usage(scopeOf(tenant), hour, Date.now()))
    const elapsed = performance.now() - started
    // What this catches is a wait that ends only when Redis returns (it does not here): 10 s is far above any machine's speed.
    t.ok(elapsed < 10_000, `rejected in ${Math.round(elapsed)} ms`)
  })
})
