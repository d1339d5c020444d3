import t, { type Test } from 'tap'
import type { Admission, DispatchPlan, LimitHit, VerifyPlan } from '../../../lib/admission/admission.js'
import { MemoryAdmission } from '../../../lib/admission/memory-admission.js'
import { RedisAdmission } from '../../../lib/admission/redis-admission.js'
import { MemoryQuotaStore } from '../../../lib/quota/memory-quota-store.js'
import { RedisQuotaStore } from '../../../lib/quota/redis-quota-store.js'
import type { QuotaStore } from '../../../lib/quota/quota-store.js'
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
  admission: Admission
  tokens: TokenStore
  quota: QuotaStore
}

const SCOPE = 'acme:live'
const TAG = `{${SCOPE}}`

function limit (name: string, max: number): LimitHit {
  return { name, bucket: `rl:${name}:${TAG}:x`, max, windowMs: 60_000 }
}

function dispatchPlan (requestId: string, overrides: Partial<DispatchPlan> = {}): DispatchPlan {
  return {
    limits: [limit('recipient', 100), limit('source', 100)],
    lockout: { key: `lockout:${TAG}:ada`, threshold: 3 },
    quota: { scope: SCOPE, limit: 100, window, nowMs: Date.now() },
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

/** The decisions every admission makes alike, whatever holds the counters. */
function admissionSuite (t: Test, makePeers: (t: Test) => Promise<Peers>): void {
  t.test('an issued dispatch counts every limit, takes one unit and stores the token', async (t) => {
    const { admission, tokens, quota } = await makePeers(t)
    const verdict = await admission.dispatch(dispatchPlan('a'))
    t.equal(verdict.kind, 'issued')
    t.strictSame(verdict.kind === 'issued' && verdict.counts.map((count) => count.current), [1, 1])
    t.ok(verdict.kind === 'issued' && verdict.counts.every((count) => count.ttlMs > 59_000 && count.ttlMs <= 60_000), 'each window started now')
    t.equal(verdict.kind === 'issued' && verdict.quota.used, 1)
    t.equal((await quota.usage(SCOPE, window, Date.now())).used, 1)
    t.equal(await tokens.take(`otp:${TAG}:a`), 'k1.code-a|ada')
  })

  t.test('an exceeded limit refuses before the quota and the token', async (t) => {
    const { admission, tokens, quota } = await makePeers(t)
    const plan = (requestId: string): DispatchPlan => dispatchPlan(requestId, { limits: [limit('recipient', 1), limit('source', 100)] })
    t.equal((await admission.dispatch(plan('a'))).kind, 'issued')
    const refused = await admission.dispatch(plan('b'))
    t.equal(refused.kind, 'limited')
    t.strictSame(refused.kind === 'limited' && refused.counts.map((count) => count.current), [2, 2], 'a refused request still counts as a request')
    t.equal((await quota.usage(SCOPE, window, Date.now())).used, 1, 'no unit taken')
    t.equal(await tokens.take(`otp:${TAG}:b`), null, 'no token')
  })

  t.test('a used-up allowance refuses without a token, and refusals do not count', async (t) => {
    const { admission, tokens, quota } = await makePeers(t)
    const plan = (requestId: string): DispatchPlan => dispatchPlan(requestId, { quota: { scope: SCOPE, limit: 1, window, nowMs: Date.now() } })
    t.equal((await admission.dispatch(plan('a'))).kind, 'issued')
    const refused = await admission.dispatch(plan('b'))
    t.equal(refused.kind, 'quota_exceeded')
    t.strictSame(refused.kind === 'quota_exceeded' && [refused.quota.allowed, refused.quota.used, refused.quota.remaining], [false, 1, 0])
    t.equal((await quota.usage(SCOPE, window, Date.now())).used, 1)
    t.equal(await tokens.take(`otp:${TAG}:b`), null)
  })

  t.test('of 100 concurrent dispatches under an allowance of 10, exactly 10 are issued', async (t) => {
    const { admission, quota } = await makePeers(t)
    const verdicts = await Promise.all(Array.from({ length: 100 }, async (_, i) =>
      await admission.dispatch(dispatchPlan(`c${i}`, { quota: { scope: SCOPE, limit: 10, window, nowMs: Date.now() } }))))
    t.equal(verdicts.filter((verdict) => verdict.kind === 'issued').length, 10)
    t.equal(verdicts.filter((verdict) => verdict.kind === 'quota_exceeded').length, 90)
    t.equal((await quota.usage(SCOPE, window, Date.now())).used, 10)
  })

  t.test('verify consumes the token once, right or wrong; only a stored form verifies', async (t) => {
    const { admission } = await makePeers(t)
    await admission.dispatch(dispatchPlan('right'))
    await admission.dispatch(dispatchPlan('wrong'))
    const concurrent = await Promise.all(Array.from({ length: 20 }, async () => await admission.verify(verifyPlan('right', ['k0.old', 'k1.code-right']))))
    t.equal(concurrent.filter((verdict) => verdict.kind === 'verified').length, 1, 'any verifying key matches; one of 20 concurrent verifies wins')
    t.equal(concurrent.filter((verdict) => verdict.kind === 'missing').length, 19)
    t.equal((await admission.verify(verifyPlan('wrong', ['k1.code-other']))).kind, 'mismatch')
    t.equal((await admission.verify(verifyPlan('wrong', ['k1.code-wrong']))).kind, 'missing', 'a wrong guess used the token up')
    t.equal((await admission.verify(verifyPlan('never', ['k1.x']))).kind, 'missing')
  })

  t.test('a limited verify leaves the token alone', async (t) => {
    const { admission } = await makePeers(t)
    await admission.dispatch(dispatchPlan('kept'))
    const plan = verifyPlan('kept', ['k1.code-kept'], { limits: [limit('key', 0)] })
    const limited = await admission.verify(plan)
    t.equal(limited.kind, 'limited')
    t.strictSame(limited.kind === 'limited' && limited.counts.map((count) => count.current), [1])
    t.equal((await admission.verify(verifyPlan('kept', ['k1.code-kept']))).kind, 'verified')
  })

  t.test('wrong guesses lock the recipient until a window passes; a right one clears the count', async (t) => {
    const { admission } = await makePeers(t)
    for (const requestId of ['w1', 'w2']) {
      await admission.dispatch(dispatchPlan(requestId))
      t.equal((await admission.verify(verifyPlan(requestId, []))).kind, 'mismatch', 'no stored form (a malformed guess) counts as wrong')
    }
    await admission.dispatch(dispatchPlan('r1'))
    t.equal((await admission.verify(verifyPlan('r1', ['k1.code-r1']))).kind, 'verified')
    for (const requestId of ['w3', 'w4', 'w5']) {
      t.equal((await admission.dispatch(dispatchPlan(requestId))).kind, 'issued', 'the right guess reset the count')
      await admission.verify(verifyPlan(requestId, ['k1.nope']))
    }
    const locked = await admission.dispatch(dispatchPlan('after'))
    t.equal(locked.kind, 'locked')
    t.ok(locked.kind === 'locked' && locked.lockoutResetMs > 59_000 && locked.lockoutResetMs <= 60_000, 'until the window that the first failure started ends')
    const other = await admission.dispatch(dispatchPlan('other', { lockout: { key: `lockout:${TAG}:bob`, threshold: 3 } }))
    t.equal(other.kind, 'issued', 'another recipient is not locked')
  })
}

t.test('memory admission', async (t) => {
  admissionSuite(t, async (t) => {
    const tokens = new MemoryTokenStore({ maxTokens: 1000 })
    const quota = new MemoryQuotaStore()
    const admission = new MemoryAdmission(tokens, quota)
    t.teardown(async () => {
      admission.close()
      await tokens.close()
    })
    return { admission, tokens, quota }
  })
})

t.test('memory admission: a full token store refuses without charging', async (t) => {
  const tokens = new MemoryTokenStore({ maxTokens: 1 })
  const quota = new MemoryQuotaStore()
  const admission = new MemoryAdmission(tokens, quota)
  t.teardown(async () => {
    admission.close()
    await tokens.close()
  })
  t.equal((await admission.dispatch(dispatchPlan('first'))).kind, 'issued')
  await t.rejects(admission.dispatch(dispatchPlan('second')), StoreFullError)
  t.equal((await quota.usage(SCOPE, window, Date.now())).used, 1, 'the refused dispatch took no unit')
})

t.test('redis admission', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  admissionSuite(t, async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    return { admission: new RedisAdmission(client), tokens: new RedisTokenStore(client), quota: new RedisQuotaStore(client) }
  })

  t.test('a taken requestId is refused before anything counts', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const admission = new RedisAdmission(client)
    await admission.dispatch(dispatchPlan('taken'))
    const before = await client.get(`rl:recipient:${TAG}:x`)
    t.strictSame(await admission.dispatch(dispatchPlan('taken')), { kind: 'collision' })
    t.equal(await client.get(`rl:recipient:${TAG}:x`), before, 'no velocity hit')
    t.equal(await client.get(`otp:${TAG}:taken`), 'k1.code-taken|ada', 'the first token is untouched')
  })

  t.test('a dispatch or a verify is one command to Redis', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const admission = new RedisAdmission(client)
    // The first call of each script loads it (EVAL); from then on it is called by its hash.
    await admission.dispatch(dispatchPlan('warm'))
    await admission.verify(verifyPlan('warm', []))
    const monitor = await client.monitor()
    t.teardown(() => { monitor.disconnect() })
    const seen: string[] = []
    // MONITOR also shows the commands a script runs, with `lua` as their source.
    monitor.on('monitor', (_time: string, args: string[], source: string) => { if (source !== 'lua') seen.push(args[0]?.toLowerCase() ?? '') })
    await admission.dispatch(dispatchPlan('one'))
    await admission.verify(verifyPlan('one', ['k1.code-one']))
    await new Promise((resolve) => setTimeout(resolve, 100))
    t.strictSame(seen, ['evalsha', 'evalsha'])
  })
})
