import t, { type Test } from 'tap'
import { AdmissionGate, type AdmissionStore } from '../../../lib/admission/gate.js'
import { MemoryAdmission } from '../../../lib/admission/memory-admission.js'
import type { DispatchPlan, LimitHit, LimitName, VerifyPlan } from '../../../lib/admission/plan.js'
import { RedisAdmission } from '../../../lib/admission/redis-admission.js'
import { MemoryQuotaStore } from '../../../lib/quota/memory-quota-store.js'
import type { QuotaStore } from '../../../lib/quota/quota-store.js'
import { RedisQuotaStore } from '../../../lib/quota/redis-quota-store.js'
import { parseWindow } from '../../../lib/quota/window.js'
import { StoreFullError } from '../../../lib/store-errors.js'
import { MemoryTokenStore } from '../../../lib/tokens/memory-token-store.js'
import { RedisTokenStore } from '../../../lib/tokens/redis-token-store.js'
import type { TokenStore } from '../../../lib/tokens/token-store.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../support/redis.js'

const hour = parseWindow('1h')
if (hour === null) throw new Error('test setup: 1h should parse')
const window = hour

interface Peers {
  gate: AdmissionGate
  store: AdmissionStore
  tokens: TokenStore
  quota: QuotaStore
}

const SCOPE = 'acme:live'
const TAG = `{${SCOPE}}`

function limit (name: LimitName, max: number): LimitHit {
  return { name, bucket: `rl:${name}:${TAG}:x`, max, windowMs: 60_000 }
}

function quota (limit: number): DispatchPlan['quota'] {
  return { scope: SCOPE, limit, window, nowMs: Date.now(), description: 'live allowance of tier "test"' }
}

function dispatchPlan (requestId: string, overrides: Partial<DispatchPlan> = {}): DispatchPlan {
  return {
    limits: [limit('recipient', 100), limit('source', 100)],
    lockout: { key: `lockout:${TAG}:ada`, threshold: 3 },
    quota: quota(100),
    token: { key: `otp:${TAG}:${requestId}`, record: `k1.code-${requestId}|ada`, ttlMs: 60_000 },
    ...overrides
  }
}

function verifyPlan (requestId: string, storedForms: string[], overrides: Partial<VerifyPlan> = {}): VerifyPlan {
  return {
    limits: [limit('source', 100)],
    tokenKey: `otp:${TAG}:${requestId}`,
    storedForms,
    lockout: { keyPrefix: `lockout:${TAG}:`, windowMs: 60_000 },
    ...overrides
  }
}

/** The decisions the gate makes alike, whatever store holds the counters. */
function admissionSuite (t: Test, makePeers: (t: Test) => Promise<Peers>): void {
  t.test('an admitted dispatch counts every limit, takes one unit and stores the token', async (t) => {
    const { gate, store, tokens, quota: quotaStore } = await makePeers(t)
    const decision = await gate.dispatch(dispatchPlan('a'))
    t.equal(decision.kind, 'admitted')
    t.match(decision, { headers: { 'ratelimit-limit': '100', 'ratelimit-remaining': '99', 'quota-limit': '100', 'quota-remaining': '99' } })
    t.equal(decision.kind === 'admitted' && decision.quota.used, 1)
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 1)
    t.equal(await tokens.take(`otp:${TAG}:a`), 'k1.code-a|ada')
    const counts = await store.dispatch(dispatchPlan('b'))
    t.strictSame(counts.kind === 'issued' && counts.counts.map((count) => count.current), [2, 2], 'each limit counted once per request')
    t.ok(counts.kind === 'issued' && counts.counts.every((count) => count.ttlMs > 59_000 && count.ttlMs <= 60_000), 'each window started with its first hit')
  })

  t.test('the tightest limit speaks in the RateLimit-* headers', async (t) => {
    const { gate } = await makePeers(t)
    const decision = await gate.dispatch(dispatchPlan('a', { limits: [limit('recipient', 5), limit('source', 100)] }))
    t.match(decision, { kind: 'admitted', headers: { 'ratelimit-limit': '5', 'ratelimit-remaining': '4', 'ratelimit-reset': '60' } })
  })

  t.test('an exceeded limit refuses with 429 before the quota and the token', async (t) => {
    const { gate, store, tokens, quota: quotaStore } = await makePeers(t)
    const plan = (requestId: string): DispatchPlan => dispatchPlan(requestId, { limits: [limit('source', 100), limit('recipient', 1)] })
    t.equal((await gate.dispatch(plan('a'))).kind, 'admitted')
    const refused = await gate.dispatch(plan('b'))
    t.match(refused, {
      kind: 'refused',
      refusal: { code: 'RATE_LIMITED', message: /^Too many requests for this recipient; retry in 60 s$/, headers: { 'retry-after': '60', 'ratelimit-limit': '1', 'ratelimit-remaining': '0' } }
    })
    const again = await store.dispatch(plan('c'))
    t.strictSame(again.kind === 'limited' && again.counts.map((count) => count.current), [3, 3], 'a refused request still counted as a request')
    t.equal(again.kind === 'limited' && again.exceeded.limit.name, 'recipient', 'the store names the limit it stopped at')
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 1, 'no unit taken')
    t.equal(await tokens.take(`otp:${TAG}:b`), null, 'no token')
  })

  t.test('a used-up allowance refuses with 402 and its Quota-* headers, without a token', async (t) => {
    const { gate, tokens, quota: quotaStore } = await makePeers(t)
    const plan = (requestId: string): DispatchPlan => dispatchPlan(requestId, { quota: quota(1) })
    t.equal((await gate.dispatch(plan('a'))).kind, 'admitted')
    const refused = await gate.dispatch(plan('b'))
    t.match(refused, {
      kind: 'refused',
      refusal: { code: 'QUOTA_EXCEEDED', message: /^The live allowance of tier "test" is used up until \d{4}-/, headers: { 'quota-limit': '1', 'quota-remaining': '0', 'ratelimit-limit': '100' } }
    })
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 1, 'a refusal does not count')
    t.equal(await tokens.take(`otp:${TAG}:b`), null)
  })

  t.test('of 100 concurrent dispatches under an allowance of 10, exactly 10 are admitted', async (t) => {
    const { gate, quota: quotaStore } = await makePeers(t)
    const decisions = await Promise.all(Array.from({ length: 100 }, async (_, i) => await gate.dispatch(dispatchPlan(`c${i}`, { quota: quota(10) }))))
    t.equal(decisions.filter((decision) => decision.kind === 'admitted').length, 10)
    t.equal(decisions.filter((decision) => decision.kind === 'refused' && decision.refusal.code === 'QUOTA_EXCEEDED').length, 90)
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 10)
  })

  t.test('verify consumes the token once, right or wrong; only a stored form verifies', async (t) => {
    const { gate } = await makePeers(t)
    await gate.dispatch(dispatchPlan('right'))
    await gate.dispatch(dispatchPlan('wrong'))
    const concurrent = await Promise.all(Array.from({ length: 20 }, async () => await gate.verify(verifyPlan('right', ['k0.old', 'k1.code-right']))))
    t.equal(concurrent.filter((decision) => decision.kind === 'verified').length, 1, 'any verifying key matches; one of 20 concurrent verifies wins')
    t.equal(concurrent.filter((decision) => decision.kind === 'missing').length, 19)
    t.match(await gate.verify(verifyPlan('wrong', ['k1.code-other'])), { kind: 'mismatch', headers: { 'ratelimit-limit': '100' } })
    t.equal((await gate.verify(verifyPlan('wrong', ['k1.code-wrong']))).kind, 'missing', 'a wrong guess used the token up')
    t.equal((await gate.verify(verifyPlan('never', ['k1.x']))).kind, 'missing')
  })

  t.test('a limited verify leaves the token alone', async (t) => {
    const { gate } = await makePeers(t)
    await gate.dispatch(dispatchPlan('kept'))
    const limited = await gate.verify(verifyPlan('kept', ['k1.code-kept'], { limits: [limit('key', 0)] }))
    t.match(limited, { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: /this key/ } })
    t.equal((await gate.verify(verifyPlan('kept', ['k1.code-kept']))).kind, 'verified')
  })

  t.test('wrong guesses lock the recipient until a window passes; a right one clears the count', async (t) => {
    const { gate } = await makePeers(t)
    for (const requestId of ['w1', 'w2']) {
      await gate.dispatch(dispatchPlan(requestId))
      t.equal((await gate.verify(verifyPlan(requestId, []))).kind, 'mismatch', 'no stored form (a malformed guess) counts as wrong')
    }
    await gate.dispatch(dispatchPlan('r1'))
    t.equal((await gate.verify(verifyPlan('r1', ['k1.code-r1']))).kind, 'verified')
    for (const requestId of ['w3', 'w4', 'w5']) {
      t.equal((await gate.dispatch(dispatchPlan(requestId))).kind, 'admitted', 'the right guess reset the count')
      await gate.verify(verifyPlan(requestId, ['k1.nope']))
    }
    const locked = await gate.dispatch(dispatchPlan('after'))
    t.match(locked, { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: /wrong codes/ } })
    const retry = locked.kind === 'refused' ? Number(locked.refusal.headers['retry-after']) : 0
    t.ok(retry > 58 && retry <= 60, `until the window that the first failure started ends (retry after ${retry} s)`)
    const other = await gate.dispatch(dispatchPlan('other', { lockout: { key: `lockout:${TAG}:bob`, threshold: 3 } }))
    t.equal(other.kind, 'admitted', 'another recipient is not locked')
  })
}

function memoryPeers (t: Test, maxTokens = 1000): Peers {
  const tokens = new MemoryTokenStore({ maxTokens })
  const quotaStore = new MemoryQuotaStore()
  const store = new MemoryAdmission(tokens, quotaStore)
  t.teardown(async () => {
    store.close()
    await tokens.close()
  })
  return { gate: new AdmissionGate(store), store, tokens, quota: quotaStore }
}

t.test('in process', async (t) => {
  admissionSuite(t, async (t) => memoryPeers(t))

  t.test('a full token store refuses without charging', async (t) => {
    const { gate, quota: quotaStore } = memoryPeers(t, 1)
    t.equal((await gate.dispatch(dispatchPlan('first'))).kind, 'admitted')
    await t.rejects(gate.dispatch(dispatchPlan('second')), StoreFullError)
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 1, 'the refused dispatch took no unit')
  })
})

t.test('on Redis', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  admissionSuite(t, async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const store = new RedisAdmission(client)
    return { gate: new AdmissionGate(store), store, tokens: new RedisTokenStore(client), quota: new RedisQuotaStore(client) }
  })

  t.test('a taken requestId is refused before anything counts', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const gate = new AdmissionGate(new RedisAdmission(client))
    await gate.dispatch(dispatchPlan('taken'))
    const before = await client.get(`rl:recipient:${TAG}:x`)
    t.strictSame(await gate.dispatch(dispatchPlan('taken')), { kind: 'collision' })
    t.equal(await client.get(`rl:recipient:${TAG}:x`), before, 'no velocity hit')
    t.equal(await client.get(`otp:${TAG}:taken`), 'k1.code-taken|ada', 'the first token is untouched')
  })

  t.test('a dispatch or a verify is one command to Redis', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const gate = new AdmissionGate(new RedisAdmission(client))
    // The first call of each script loads it (EVAL); from then on it is called by its hash.
    await gate.dispatch(dispatchPlan('warm'))
    await gate.verify(verifyPlan('warm', []))
    const monitor = await client.monitor()
    t.teardown(() => { monitor.disconnect() })
    const seen: string[] = []
    // MONITOR also shows the commands a script runs, with `lua` as their source.
    monitor.on('monitor', (_time: string, args: string[], source: string) => { if (source !== 'lua') seen.push(args[0]?.toLowerCase() ?? '') })
    await gate.dispatch(dispatchPlan('one'))
    await gate.verify(verifyPlan('one', ['k1.code-one']))
    await new Promise((resolve) => setTimeout(resolve, 100))
    t.strictSame(seen, ['evalsha', 'evalsha'])
  })
})
