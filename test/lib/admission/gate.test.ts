import t, { type Test } from 'tap'
import { AdmissionGate, BROWSER_RETRY_SECONDS, type DispatchDecision } from '../../../lib/admission/gate.js'
import type { AdmissionStore } from '../../../lib/state/admission.js'
import { MemoryAdmission } from '../../../lib/state/memory/admission.js'
import { OVER_LIMIT_MEMORY_ENTRIES, OVER_LIMIT_MEMORY_MS, OverLimitMemory } from '../../../lib/admission/over-limit.js'
import type { LockoutPolicy } from '../../../lib/limits/lockout-policy.js'
import type { DispatchPlan, LimitHit, Mailbox, MailboxCap, TenantLimitName, VerifyPlan } from '../../../lib/state/admission.js'
import { bothLanes } from '../../../lib/admission/plan.js'
import { RedisAdmission } from '../../../lib/state/redis/admission.js'
import { MemoryQuotaStore } from '../../../lib/state/memory/quota-store.js'
import type { QuotaStore } from '../../../lib/state/quota.js'
import { RedisQuotaStore } from '../../../lib/state/redis/quota-store.js'
import { parseWindow } from '../../../lib/limits/window.js'
import { StoreFullError, StoreUnavailableError } from '../../../lib/store-errors.js'
import { ReplicaAcks } from '../../../lib/state/redis/replica-acks.js'
import { MemoryTokenStore } from '../../../lib/state/memory/token-store.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../support/redis.js'
import { until } from '../../support/wait.js'

const hour = parseWindow('1h')
if (hour === null) throw new Error('test setup: 1h should parse')
const window = hour

interface Peers {
  gate: AdmissionGate
  store: AdmissionStore
  quota: QuotaStore
}

const SCOPE = 'acme:live'
/** The tenant's hash tag on Redis, for the tests that read its keys there. */
const TAG = `{${SCOPE}}`
const ADA: Mailbox = { tenantId: 'acme', mode: 'live', recipientTag: 'ada' }

function limit (name: TenantLimitName, max: number, tenantId = 'acme'): LimitHit {
  return { name, tenantId, mode: 'live', bucket: 'x', max, windowMs: 60_000 }
}

function quota (limit: number, share: number | null = null): DispatchPlan['quota'] {
  return {
    tenant: { scope: SCOPE, share: null, limit, window },
    share: share === null ? null : { scope: SCOPE, share: 'rk1', limit: share, window },
    nowMs: Date.now(),
    description: 'live allowance of tier "test"'
  }
}

const LOCKOUT: LockoutPolicy = { threshold: 3, baseMs: 60_000, maxMs: 3_600_000, resetAfterMs: 86_400_000 }

function dispatchPlan (requestId: string, overrides: Partial<DispatchPlan> = {}): DispatchPlan {
  return {
    lane: 'backend',
    recipient: ADA,
    suppression: 'refuse',
    laneSubject: 'ada',
    ownLimits: [limit('source', 100)],
    sharedLimits: [limit('recipient', 100)],
    mailbox: null,
    quota: quota(100),
    token: { requestId, record: `k1.code-${requestId}|ada`, ttlMs: 60_000 },
    ...overrides
  }
}

/**
 * A dispatch of `tenantId`'s to the cap's mailbox, with a recipient limit (five by default, as
 * configured by default): each tenant's own buckets, allowance and token.
 */
function cappedPlan (cap: MailboxCap, tenantId: string, requestId: string, recipientMax = 5): DispatchPlan {
  return dispatchPlan(`${tenantId}-${requestId}`, {
    recipient: { ...ADA, tenantId, recipientTag: cap.bucket },
    laneSubject: cap.bucket,
    ownLimits: [limit('source', 100, tenantId)],
    sharedLimits: [{ ...limit('recipient', recipientMax, tenantId), bucket: cap.bucket }],
    mailbox: cap,
    quota: { ...quota(100), tenant: { scope: `${tenantId}:live`, share: null, limit: 100, window } }
  })
}

function verifyPlan (requestId: string, storedForms: string[], overrides: Partial<VerifyPlan> = {}): VerifyPlan {
  return {
    lane: 'backend',
    ownLimits: [limit('source', 100)],
    sharedLimits: [],
    token: { tenantId: 'acme', mode: 'live', requestId },
    storedForms,
    lockout: LOCKOUT,
    ...overrides
  }
}

/** The decisions the gate makes alike, whatever store holds the counters. */
function admissionSuite (t: Test, makePeers: (t: Test) => Promise<Peers>): void {
  t.test('an admitted dispatch counts every limit, takes one unit and stores the token', async (t) => {
    const { gate, store, quota: quotaStore } = await makePeers(t)
    const decision = await gate.dispatch(dispatchPlan('a'))
    t.equal(decision.kind, 'admitted')
    t.match(decision, { headers: { 'ratelimit-limit': '100', 'ratelimit-remaining': '99', 'quota-limit': '100', 'quota-remaining': '99' } })
    t.equal(decision.kind === 'admitted' && decision.quota.used, 1)
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 1)
    const counts = await store.dispatch(dispatchPlan('b'))
    t.strictSame(counts.kind === 'issued' && counts.counts.map((count) => count.current), [2, 2], 'each limit counted once per request')
    t.ok(counts.kind === 'issued' && counts.counts.every((count) => count.ttlMs > 30_000 && count.ttlMs <= 60_000), 'each window started with its first hit')
    t.equal((await store.verify(verifyPlan('a', ['k1.code-a']))).kind, 'verified', 'the token was stored')
  })

  t.test('a suppressed mailbox, refused: after the caller\'s own limits, before shared ones, no unit, no token', async (t) => {
    const { gate, store, quota: quotaStore } = await makePeers(t)
    t.equal(await gate.unsuppress(ADA), false, 'nothing to lift yet')
    await gate.suppress(ADA, 60_000)
    const counts = await store.dispatch(dispatchPlan('a'))
    t.equal(counts.kind, 'suppressed')
    t.strictSame(counts.kind === 'suppressed' && counts.counts.map((count) => count.current), [1], 'the source counted, the recipient bucket not')
    t.match(await gate.dispatch(dispatchPlan('b')), { kind: 'refused', refusal: { code: 'RECIPIENT_SUPPRESSED', headers: {} } })
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 0, 'no unit taken')
    t.equal((await store.verify(verifyPlan('a', ['k1.code-a']))).kind, 'missing', 'no token')
    t.equal((await gate.dispatch(dispatchPlan('d', { recipient: { ...ADA, recipientTag: 'bob' } }))).kind, 'admitted', 'another mailbox is not suppressed')
    t.equal(await gate.unsuppress(ADA), true, 'lifted')
    t.equal((await gate.dispatch(dispatchPlan('e'))).kind, 'admitted', 'and dispatch works again')
    await gate.suppress(ADA, 1)
    await until('a suppression ends by itself', async () => (await store.dispatch(dispatchPlan(`f${Date.now()}`))).kind === 'issued')
  })

  t.test('a suppressed mailbox, withheld: every counter and the token as for an issued code, so a page meets what it would meet after a failed delivery', async (t) => {
    const { gate, store, quota: quotaStore } = await makePeers(t)
    await gate.suppress(ADA, 60_000)
    const bob: Mailbox = { ...ADA, recipientTag: 'bob' }
    // The same requests to each mailbox, from its own source, on its own allowance of two.
    const page = (mailbox: Mailbox, requestId: string): DispatchPlan => dispatchPlan(`${mailbox.recipientTag}-${requestId}`, {
      lane: 'browser',
      suppression: 'withhold',
      recipient: mailbox,
      ownLimits: [{ ...limit('source', 100), bucket: mailbox.recipientTag }],
      sharedLimits: [{ ...limit('recipient', 3), bucket: mailbox.recipientTag }],
      quota: { ...quota(2), tenant: { scope: `${mailbox.recipientTag}:live`, share: null, limit: 2, window } }
    })
    const decisions = async (mailbox: Mailbox): Promise<DispatchDecision[]> => {
      const made: DispatchDecision[] = []
      for (const requestId of ['a', 'b', 'c', 'd']) made.push(await gate.dispatch(page(mailbox, requestId)))
      return made
    }
    const suppressed = await decisions(ADA)
    const deliverable = await decisions(bob)
    t.strictSame(suppressed.map((decision) => decision.kind), ['withheld', 'withheld', 'refused', 'refused'])
    t.strictSame(deliverable.map((decision) => decision.kind), ['admitted', 'admitted', 'refused', 'refused'])
    const withoutKind = (decision: DispatchDecision): unknown => decision.kind === 'collision' ? null : { ...decision, kind: undefined, quota: decision.kind === 'refused' ? undefined : { ...decision.quota, resetMs: undefined } }
    t.strictSame(suppressed.map(withoutKind), deliverable.map(withoutKind), 'the same headers, units and refusals: the allowance used up, then the recipient\'s bucket full')
    t.equal((await quotaStore.usage('ada:live', window, Date.now())).used, 2, 'its units were taken, for the caller to give back')
    t.equal((await store.verify(verifyPlan('ada-a', ['k1.code-ada-a']))).kind, 'verified', 'its token was written, for the caller to delete')
  })

  t.test('the tightest limit speaks in the RateLimit-* headers', async (t) => {
    const { gate } = await makePeers(t)
    const decision = await gate.dispatch(dispatchPlan('a', { ownLimits: [limit('source', 100)], sharedLimits: [limit('recipient', 5)] }))
    t.match(decision, { kind: 'admitted', headers: { 'ratelimit-limit': '5', 'ratelimit-remaining': '4', 'ratelimit-reset': '60' } })
  })

  t.test('an exceeded limit refuses with 429 before the quota and the token', async (t) => {
    const { gate, store, quota: quotaStore } = await makePeers(t)
    const plan = (requestId: string): DispatchPlan => dispatchPlan(requestId, { ownLimits: [limit('source', 100)], sharedLimits: [limit('recipient', 1)] })
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
    t.equal((await store.verify(verifyPlan('b', ['k1.code-b']))).kind, 'missing', 'no token')
  })

  t.test('limits count in order up to the first exceeded: a source past its limit no longer fills shared buckets', async (t) => {
    const { gate, store } = await makePeers(t)
    const mine = { ownLimits: [limit('source', 2)], sharedLimits: [limit('key', 100)] }
    for (const requestId of ['v0', 'v1', 'v2', 'v3', 'v4', 'last', 'other']) await gate.dispatch(dispatchPlan(requestId, { ownLimits: [], sharedLimits: [] }))
    for (let i = 0; i < 5; i++) await gate.verify(verifyPlan(`v${i}`, [], mine))
    const counted = await store.verify(verifyPlan('last', [], mine))
    t.strictSame(counted.counts.map((count) => count.current), [6], 'the source counted six times, the key only while the source was within its limit')
    const other = await store.verify(verifyPlan('other', [], { ...mine, ownLimits: [{ ...limit('source', 2), bucket: 'y' }] }))
    t.strictSame(other.counts.map((count) => count.current), [1, 3], 'another source still has its whole budget and the key bucket holds two of the first source\'s hits')
  })

  t.test('a verify of an unknown requestId counts only the caller\'s own buckets: junk cannot fill the key\'s', async (t) => {
    const { gate, store } = await makePeers(t)
    const plan = (requestId: string, source: string, forms: string[] = []): VerifyPlan => verifyPlan(requestId, forms, {
      lane: 'browser',
      ownLimits: [{ ...limit('source', 3), bucket: source }],
      sharedLimits: [limit('key', 2)]
    })
    const junk = []
    // Ten sources, each up to its own limit and past it: forty made-up requestIds.
    for (let source = 0; source < 10; source++) {
      for (let i = 0; i < 4; i++) junk.push(await store.verify(plan(`junk-${source}-${i}`, `s${source}`)))
    }
    t.equal(junk.filter((counts) => counts.kind === 'missing').length, 30, 'each source\'s first three are answered like any wrong code')
    t.ok(junk.every((counts) => counts.kind === 'missing' ? counts.counts.length === 1 : counts.kind === 'limited' && counts.exceeded.limit.name === 'source'), 'the rest meet their own source\'s limit, never the key\'s')
    await gate.dispatch(dispatchPlan('real'))
    const real = await store.verify(plan('real', 'user', ['k1.code-real']))
    t.equal(real.kind, 'verified', 'a real user\'s code still verifies through the key')
    t.strictSame(real.counts.map((count) => count.current), [1, 1], 'the key\'s bucket counted this live code only')
  })

  t.test('a verify refused for the key\'s bucket leaves its code usable', async (t) => {
    const { gate } = await makePeers(t)
    await gate.dispatch(dispatchPlan('kept'))
    const full = { sharedLimits: [limit('key', 0)] }
    t.match(await gate.verify(verifyPlan('kept', ['k1.code-kept'], full)), { kind: 'refused', refusal: { code: 'RATE_LIMITED' } })
    t.equal((await gate.verify(verifyPlan('kept', ['k1.code-kept'], { sharedLimits: [{ ...limit('key', 100), bucket: 'other' }] }))).kind, 'verified', 'not consumed by the refusal')
  })

  t.test('a browser hears only of its own source: no shared bucket, no billing', async (t) => {
    const { gate } = await makePeers(t)
    const browser = (requestId: string): DispatchPlan => dispatchPlan(requestId, { lane: 'browser', ownLimits: [limit('source', 10)], sharedLimits: [{ ...limit('recipient', 2), windowMs: 900_000 }, limit('key', 5)] })
    const admitted = await gate.dispatch(browser('a'))
    t.match(admitted, { kind: 'admitted', headers: { 'ratelimit-limit': '10', 'ratelimit-remaining': '9' } })
    t.notOk(admitted.kind === 'admitted' && 'quota-limit' in admitted.headers, 'no Quota-* headers')
    await gate.dispatch(browser('b'))
    const refused = await gate.dispatch(browser('c'))
    const constant = { code: 'RATE_LIMITED', message: `Too many requests; retry in ${BROWSER_RETRY_SECONDS} s`, headers: { 'retry-after': String(BROWSER_RETRY_SECONDS) } }
    t.strictSame(refused, { kind: 'refused', refusal: constant }, 'the recipient bucket stays unnamed and uncounted, and its window\'s end untold')
    const keyFull = (requestId: string): DispatchPlan => dispatchPlan(requestId, { lane: 'browser', ownLimits: [{ ...limit('source', 10), bucket: 'y' }], sharedLimits: [{ ...limit('recipient', 10), bucket: 'z' }, { ...limit('key', 3), bucket: 'k', windowMs: 30_000 }] })
    for (const requestId of ['e', 'f', 'g']) await gate.dispatch(keyFull(requestId))
    t.strictSame(await gate.dispatch(keyFull('h')), { kind: 'refused', refusal: constant }, 'a full key bucket says the same')
    const quotaRefused = await gate.dispatch(dispatchPlan('d', { lane: 'browser', quota: quota(0) }))
    t.match(quotaRefused, { kind: 'refused', refusal: { code: 'QUOTA_EXCEEDED', message: 'The allowance of this key is used up' } })
    t.notOk(quotaRefused.kind === 'refused' && Object.keys(quotaRefused.refusal.headers).some((name) => name.startsWith('quota-')), 'a 402 to a page carries no Quota-*')
  })

  t.test('a restricted key\'s share ends at its own 402; the tenant keeps the rest', async (t) => {
    const { gate, quota: quotaStore } = await makePeers(t)
    const shared = (requestId: string): DispatchPlan => dispatchPlan(requestId, { quota: quota(10, 2) })
    t.equal((await gate.dispatch(shared('a'))).kind, 'admitted')
    t.equal((await gate.dispatch(shared('b'))).kind, 'admitted')
    t.match(await gate.dispatch(shared('c')), { kind: 'refused', refusal: { code: 'QUOTA_EXCEEDED' } })
    t.equal((await quotaStore.usage(SCOPE, window, Date.now(), 'rk1')).used, 2, 'the share is used up')
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 2, 'its refusal took nothing from the tenant')
    t.match(await gate.dispatch(dispatchPlan('backend', { quota: quota(10) })), { kind: 'admitted', headers: { 'quota-remaining': '7' } }, 'the tenant\'s own dispatches go on')
  })

  t.test('the service-wide mailbox cap counts only dispatches that pass everything else', async (t) => {
    const { gate, quota: quotaStore } = await makePeers(t)
    const mailbox: DispatchPlan['mailbox'] = { name: 'mailbox', mode: 'live', bucket: 'ada', max: 2, windowMs: 60_000, reserve: 0 }
    const plan = (requestId: string, recipientMax = 100): DispatchPlan => dispatchPlan(requestId, { mailbox, sharedLimits: [{ ...limit('recipient', recipientMax), bucket: requestId }] })
    t.match(await gate.dispatch(plan('a', 0)), { kind: 'refused', refusal: { message: /recipient/ } }, 'a dispatch refused by its tenant\'s limit')
    t.equal((await gate.dispatch(plan('b'))).kind, 'admitted')
    t.equal((await gate.dispatch(plan('c'))).kind, 'admitted', 'the refused one did not count against the mailbox')
    t.match(await gate.dispatch(plan('d')), { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: 'Too many requests for this recipient; retry in 60 s', headers: { 'retry-after': '60', 'ratelimit-limit': '100', 'ratelimit-remaining': '0', 'ratelimit-reset': '60' } } }, 'the cap answers as the tenant\'s recipient limit, with its whole window')
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 2, 'nothing charged for the capped one')
  })

  t.test('each tenant keeps a reserve inside the mailbox cap: three tenants filling it leave a fourth its first two codes, and no more', async (t) => {
    const { gate, store } = await makePeers(t)
    const cap: MailboxCap = { name: 'mailbox', mode: 'live', bucket: 'ada', max: 15, windowMs: 60_000, reserve: 2 }
    const kinds = async (tenantId: string, tries: number): Promise<string[]> => {
      const found: string[] = []
      for (let i = 0; i < tries; i++) found.push((await gate.dispatch(cappedPlan(cap, tenantId, `${found.length}`))).kind)
      return found
    }
    for (const attacker of ['atk1', 'atk2', 'atk3']) t.strictSame(await kinds(attacker, 6), ['admitted', 'admitted', 'admitted', 'admitted', 'admitted', 'refused'], `${attacker} sends its five: fifteen fill the cap`)
    t.strictSame(await kinds('victim', 2), ['admitted', 'admitted'], 'the victim tenant\'s backend still reaches its user')
    const third = await store.dispatch(cappedPlan(cap, 'victim', 'third'))
    t.equal(third.kind === 'limited' && third.exceeded.limit.name, 'mailbox', 'its third meets the cap')
    t.match(await gate.dispatch(cappedPlan(cap, 'victim', 'fourth')), { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: 'Too many requests for this recipient; retry in 60 s' } }, 'in the words of its own recipient limit')
    t.strictSame(await kinds('atk4', 3), ['admitted', 'admitted', 'refused'], 'a fourth attacker gets its reserve and no more: the cap plus two per tenant')
    const other = await store.dispatch(cappedPlan({ ...cap, bucket: 'bob' }, 'atk1', 'bob'))
    t.equal(other.kind, 'issued', 'another mailbox has a cap of its own')
  })

  t.test('a refund gives back one unit of the tenant\'s mailbox count, never below zero: the reserve is for codes that left', async (t) => {
    const { gate } = await makePeers(t)
    const cap: MailboxCap = { name: 'mailbox', mode: 'live', bucket: 'ada', max: 1, windowMs: 60_000, reserve: 2 }
    const send = async (requestId: string): Promise<string> => (await gate.dispatch(cappedPlan(cap, 'victim', requestId, 100))).kind
    t.equal((await gate.dispatch(cappedPlan(cap, 'other', 'fill'))).kind, 'admitted', 'another tenant fills the cap')
    t.strictSame([await send('a'), await send('b'), await send('c')], ['admitted', 'admitted', 'refused'])
    await gate.refundMailboxCount(cappedPlan(cap, 'victim', 'b'))
    t.strictSame([await send('d'), await send('e')], ['admitted', 'refused'], 'the refunded unit, and only it, is there again')
    for (let i = 0; i < 3; i++) await gate.refundMailboxCount(cappedPlan(cap, 'victim', 'more'))
    t.strictSame([await send('f'), await send('g'), await send('h')], ['admitted', 'admitted', 'refused'], 'three refunds of a count of two left it at zero, not below: two codes, then the cap')
    await gate.refundMailboxCount(dispatchPlan('no-cap'))
    t.pass('a plan without the cap refunds nothing')
  })

  t.test('a used-up allowance refuses with 402 and its Quota-* headers, without a token', async (t) => {
    const { gate, store, quota: quotaStore } = await makePeers(t)
    const plan = (requestId: string): DispatchPlan => dispatchPlan(requestId, { quota: quota(1) })
    t.equal((await gate.dispatch(plan('a'))).kind, 'admitted')
    const refused = await gate.dispatch(plan('b'))
    t.match(refused, {
      kind: 'refused',
      refusal: { code: 'QUOTA_EXCEEDED', message: /^The live allowance of tier "test" is used up until \d{4}-/, headers: { 'quota-limit': '1', 'quota-remaining': '0', 'ratelimit-limit': '100' } }
    })
    t.equal((await quotaStore.usage(SCOPE, window, Date.now())).used, 1, 'a refusal does not count')
    t.equal((await store.verify(verifyPlan('b', ['k1.code-b']))).kind, 'missing', 'no token')
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
    const limited = await gate.verify(verifyPlan('kept', ['k1.code-kept'], { ownLimits: [limit('source', 0)] }))
    t.match(limited, { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: /this source/ } })
    t.equal((await gate.verify(verifyPlan('kept', ['k1.code-kept']))).kind, 'verified')
  })

  t.test('consecutive wrong guesses lock the recipient; a right one clears the run', async (t) => {
    const { gate } = await makePeers(t)
    for (const requestId of ['w1', 'w2']) {
      await gate.dispatch(dispatchPlan(requestId))
      t.match(await gate.verify(verifyPlan(requestId, [])), { kind: 'mismatch', lockStartedMs: 0 }, 'no stored form (a malformed guess) counts as wrong')
    }
    await gate.dispatch(dispatchPlan('r1'))
    t.equal((await gate.verify(verifyPlan('r1', ['k1.code-r1']))).kind, 'verified')
    for (const requestId of ['w3', 'w4']) {
      t.equal((await gate.dispatch(dispatchPlan(requestId))).kind, 'admitted', 'the right guess reset the run')
      await gate.verify(verifyPlan(requestId, ['k1.nope']))
    }
    await gate.dispatch(dispatchPlan('outstanding'))
    await gate.dispatch(dispatchPlan('w5'))
    t.match(await gate.verify(verifyPlan('w5', ['k1.nope'])), { kind: 'mismatch', lockStartedMs: 60_000 }, 'the third in a row starts the first lock')
    const locked = await gate.dispatch(dispatchPlan('after'))
    t.match(locked, { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: /wrong codes/ } })
    const retry = locked.kind === 'refused' ? Number(locked.refusal.headers['retry-after']) : 0
    t.ok(retry > 30 && retry <= 60, `dispatch waits for the lock to end (retry after ${retry} s)`)
    t.equal((await gate.verify(verifyPlan('outstanding', ['k1.code-outstanding']))).kind, 'locked', 'a code minted before the lock cannot be tried, even with the right guess')
    t.equal((await gate.verify(verifyPlan('outstanding', ['k1.code-outstanding']))).kind, 'missing', 'and it is used up')
    const other = await gate.dispatch(dispatchPlan('other', { laneSubject: 'bob' }))
    t.equal(other.kind, 'admitted', 'another recipient is not locked')
    t.equal(await gate.clearLockout(bothLanes('acme', 'live', 'ada')), true, 'a tenant clears the lock')
    t.equal((await gate.dispatch(dispatchPlan('cleared'))).kind, 'admitted')
    t.equal(await gate.clearLockout(bothLanes('acme', 'live', 'ada')), false, 'nothing left to clear')
  })

  t.test('lanes: wrong guesses on codes a page asked for lock the browser lane only, and a page never hears when it ends', async (t) => {
    const { gate } = await makePeers(t)
    const policy = { ...LOCKOUT, baseMs: 600_000 }
    const pageCode = (requestId: string): DispatchPlan => dispatchPlan(requestId, {
      lane: 'browser',
      sharedLimits: [{ ...limit('recipient', 100), bucket: 'browser:ada' }],
      laneSubject: 'browser:ada',
      token: { requestId, record: `k1.code-${requestId}|browser:ada`, ttlMs: 60_000 }
    })
    const guess = async (requestId: string, form: string, lane: 'backend' | 'browser' = 'browser') => await gate.verify(verifyPlan(requestId, [form], { lane, lockout: policy }))
    t.equal((await gate.dispatch(dispatchPlan('owner'))).kind, 'admitted', 'the owner\'s backend asked for a code')
    t.equal((await gate.dispatch(pageCode('outstanding'))).kind, 'admitted')
    for (const requestId of ['s1', 's2', 's3']) {
      t.equal((await gate.dispatch(pageCode(requestId))).kind, 'admitted')
      await guess(requestId, 'k1.nope')
    }
    const refused = await gate.dispatch(pageCode('s4'))
    t.match(refused, { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: `Too many requests; retry in ${BROWSER_RETRY_SECONDS} s` } })
    t.strictSame(refused.kind === 'refused' && refused.refusal.headers, { 'retry-after': String(BROWSER_RETRY_SECONDS) }, 'a constant, not the lock\'s ten minutes')
    t.equal((await guess('outstanding', 'k1.code-outstanding')).kind, 'locked', 'the browser lane\'s codes are consumed unread')
    t.equal((await guess('owner', 'k1.code-owner')).kind, 'verified', 'the backend lane\'s code verifies, whatever key sends the guess')
    t.equal((await gate.dispatch(dispatchPlan('owner2'))).kind, 'admitted', 'and the backend lane still dispatches')
    for (const requestId of ['b1', 'b2', 'b3']) {
      await gate.dispatch(dispatchPlan(requestId))
      await guess(requestId, 'k1.nope')
    }
    const backendLocked = await gate.dispatch(dispatchPlan('b4'))
    t.match(backendLocked, { kind: 'refused', refusal: { message: /wrong codes/ } }, 'a backend-lane code guessed through a page counts in the backend lane')
    const retry = backendLocked.kind === 'refused' ? Number(backendLocked.refusal.headers['retry-after']) : 0
    t.ok(retry > 300 && retry <= 600, `the backend hears the lock's own end (retry after ${retry} s)`)
    t.equal(await gate.clearLockout(bothLanes('acme', 'live', 'ada')), true)
    t.equal((await gate.dispatch(pageCode('s5'))).kind, 'admitted', 'an unlock clears both lanes')
    t.equal((await gate.dispatch(dispatchPlan('b5'))).kind, 'admitted')
  })

  t.test('a record written before lanes counts in the backend lane', async (t) => {
    const { gate } = await makePeers(t)
    for (const requestId of ['o1', 'o2', 'o3']) {
      await gate.dispatch(dispatchPlan(requestId, { token: { requestId, record: `k1.code-${requestId}|ada`, ttlMs: 60_000 } }))
      await gate.verify(verifyPlan(requestId, ['k1.nope'], { lane: 'browser' }))
    }
    t.match(await gate.dispatch(dispatchPlan('after')), { kind: 'refused', refusal: { message: /wrong codes/ } })
  })

  t.test('a refused request counts against the caller\'s limits; past them it is a 429', async (t) => {
    const { gate } = await makePeers(t)
    const plan = { lane: 'backend' as const, limits: [limit('source', 2), limit('key', 100)] }
    t.equal(await gate.countRefused(plan), null)
    t.equal(await gate.countRefused(plan), null)
    t.match(await gate.countRefused(plan), { code: 'RATE_LIMITED', message: /source/, headers: { 'retry-after': '60' } })
    t.match(await gate.dispatch(dispatchPlan('a', { ownLimits: [limit('source', 2)] })), { kind: 'refused' }, 'the refusals used the source\'s budget')
  })
}

function memoryPeers (t: Test, maxTokens = 1000): Peers {
  const tokens = new MemoryTokenStore({ maxTokensPerScope: maxTokens })
  const quotaStore = new MemoryQuotaStore()
  const store = new MemoryAdmission(tokens, quotaStore)
  t.teardown(async () => { await tokens.close() })
  return { gate: new AdmissionGate(store), store, quota: quotaStore }
}

t.test('in process', async (t) => {
  admissionSuite(t, async (t) => memoryPeers(t))

  t.test('a full lockout share refuses new mailboxes of its lane with 503, forgets no run, and leaves the other lane alone', async (t) => {
    const tokens = new MemoryTokenStore({ maxTokensPerScope: 1000 })
    t.teardown(async () => { await tokens.close() })
    const gate = new AdmissionGate(new MemoryAdmission(tokens, new MemoryQuotaStore(), { lockoutStatesPerShare: 2 }))
    const pageCode = (requestId: string, mailbox: string): DispatchPlan => dispatchPlan(requestId, {
      lane: 'browser',
      laneSubject: `browser:${mailbox}`,
      token: { requestId, record: `k1.code-${requestId}|browser:${mailbox}`, ttlMs: 60_000 }
    })
    for (const mailbox of ['m1', 'm2']) {
      await gate.dispatch(pageCode(mailbox, mailbox))
      t.equal((await gate.verify(verifyPlan(mailbox, ['k1.nope']))).kind, 'mismatch', 'a run starts')
    }
    await t.rejects(gate.dispatch(pageCode('m3', 'm3')), StoreFullError, 'no code is sent whose wrong guess could not be counted')
    t.equal((await gate.dispatch(pageCode('m1-again', 'm1'))).kind, 'admitted', 'a mailbox with a run goes on')
    t.match(await gate.verify(verifyPlan('m1-again', ['k1.nope'])), { kind: 'mismatch' }, 'and its run grows')
    await gate.dispatch(pageCode('m1-last', 'm1'))
    t.match(await gate.verify(verifyPlan('m1-last', ['k1.nope'])), { kind: 'mismatch', lockStartedMs: 60_000 }, 'the run was never forgotten: the third wrong guess locks')
    t.equal((await gate.dispatch(dispatchPlan('backend-lane', { laneSubject: 'm3' }))).kind, 'admitted', 'the backend lane has its own share')
    t.equal((await gate.verify(verifyPlan('backend-lane', ['k1.nope']))).kind, 'mismatch')
  })

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
    return { gate: new AdmissionGate(store), store, quota: new RedisQuotaStore(client) }
  })

  t.test('a taken requestId is refused before anything counts', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const gate = new AdmissionGate(new RedisAdmission(client))
    await gate.dispatch(dispatchPlan('taken'))
    const before = await client.get(`rl:r:${TAG}:x`)
    t.equal(before, '1', 'the first dispatch counted its recipient')
    t.strictSame(await gate.dispatch(dispatchPlan('taken')), { kind: 'collision' })
    t.equal(await client.get(`rl:r:${TAG}:x`), before, 'no velocity hit')
    t.equal(await client.get(`otp:${TAG}:taken`), 'k1.code-taken|ada', 'the first token is untouched')
  })

  t.test('a caller past its own limit is refused from memory: the same 429, no round trip', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const gate = new AdmissionGate(new RedisAdmission(client), new OverLimitMemory())
    const mine = { ownLimits: [limit('source', 2)] }
    for (const requestId of ['a', 'b']) t.equal((await gate.dispatch(dispatchPlan(requestId, mine))).kind, 'admitted')
    const fromStore = await gate.dispatch(dispatchPlan('c', mine))
    t.match(fromStore, { kind: 'refused', refusal: { code: 'RATE_LIMITED', headers: { 'ratelimit-limit': '2', 'ratelimit-remaining': '0' } } })
    const monitor = await client.monitor()
    t.teardown(() => { monitor.disconnect() })
    const seen: string[] = []
    monitor.on('monitor', (_time: string, args: string[], source: string) => { if (source !== 'lua') seen.push(args[0]?.toLowerCase() ?? '') })
    const fromMemory = await gate.dispatch(dispatchPlan('d', mine))
    t.match(fromMemory, { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: /^Too many requests for this source; retry in (59|60) s$/, headers: { 'ratelimit-limit': '2', 'ratelimit-remaining': '0', 'retry-after': /^(59|60)$/ } } })
    t.match(await gate.verify(verifyPlan('a', ['k1.code-a'], mine)), { kind: 'refused' }, 'a verify from the same source too')
    t.match(await gate.countRefused({ lane: 'backend', limits: mine.ownLimits }), { code: 'RATE_LIMITED' }, 'and a request refused before admission')
    t.equal((await gate.dispatch(dispatchPlan('other', { ownLimits: [{ ...limit('source', 2), bucket: 'y' }] }))).kind, 'admitted', 'another source is asked about')
    await client.echo('end of the commands under test')
    await until('MONITOR to report the marker', () => seen.at(-1) === 'echo')
    t.strictSame(seen, ['evalsha', 'echo'], 'only the other source\'s dispatch went to Redis')
    t.equal(await client.exists(`otp:${TAG}:d`), 0, 'no token')
  })

  t.test('two instances remembering refusals admit no more than the shared limit between them', async (t) => {
    const clients = await Promise.all([connectFailFast(server.url), connectFailFast(server.url)])
    t.teardown(() => { for (const client of clients) client.disconnect() })
    await clients[0].flushall()
    const gates = clients.map((client) => new AdmissionGate(new RedisAdmission(client), new OverLimitMemory()))
    const mine = { ownLimits: [limit('source', 7)] }
    const decisions = await Promise.all(Array.from({ length: 60 }, async (_, index) => await (gates[index % 2] as AdmissionGate).dispatch(dispatchPlan(`r${index}`, mine))))
    t.equal(decisions.filter((decision) => decision.kind === 'admitted').length, 7)
    t.equal(decisions.filter((decision) => decision.kind === 'refused').length, 53)
  })

  t.test('a dispatch undone for want of replicas gives back its unit of the tenant\'s mailbox count, with its token and quota unit', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    // No replica answers this standalone server: every admitted dispatch is undone.
    const store = new RedisAdmission(client, new ReplicaAcks(client, { count: 1, timeoutMs: 10 }))
    const cap: MailboxCap = { name: 'mailbox', mode: 'live', bucket: 'ada', max: 15, windowMs: 60_000, reserve: 2 }
    await t.rejects(store.dispatch(cappedPlan(cap, 'acme', 'undone')), StoreUnavailableError)
    t.equal(await client.exists(`otp:${TAG}:acme-undone`), 0, 'the token is gone')
    t.equal((await new RedisQuotaStore(client).usage(SCOPE, window, Date.now())).used, 0, 'the unit is back')
    t.equal(await client.get(`rl:mc:${TAG}:ada`), '0', 'and so is the tenant\'s count')
    t.equal(await client.get('rl:m:{mailbox:live:ada}'), '1', 'the cap counts the attempt, as it counts every dispatch that reached it')
  })

  t.test('a dispatch or a verify is one command to Redis, the mailbox cap and the tenant\'s reserve included', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const gate = new AdmissionGate(new RedisAdmission(client))
    const mailbox: MailboxCap = { name: 'mailbox', mode: 'live', bucket: 'ada', max: 15, windowMs: 60_000, reserve: 2 }
    // The first call of each script loads it (EVAL); from then on it is called by its hash.
    await gate.dispatch(dispatchPlan('warm', { mailbox }))
    await gate.verify(verifyPlan('warm', []))
    const monitor = await client.monitor()
    t.teardown(() => { monitor.disconnect() })
    const seen: string[] = []
    // MONITOR also shows the commands a script runs, with `lua` as their source.
    monitor.on('monitor', (_time: string, args: string[], source: string) => { if (source !== 'lua') seen.push(args[0]?.toLowerCase() ?? '') })
    t.equal((await gate.dispatch(dispatchPlan('one', { mailbox }))).kind, 'admitted')
    await gate.verify(verifyPlan('one', ['k1.code-one']))
    // MONITOR reports commands in the order Redis ran them: once this marker shows, so has
    // everything before it.
    await client.echo('end of the commands under test')
    await until('MONITOR to report the marker', () => seen.at(-1) === 'echo')
    t.strictSame(seen, ['evalsha', 'evalsha', 'echo'])
    t.equal(await client.get(`rl:mc:${TAG}:ada`), '2', 'the tenant\'s count was taken in that one command')
  })
})

t.test('the memory of callers past their limits', async (t) => {
  let nowMs = 1_000_000
  const memory = new OverLimitMemory(() => nowMs)
  const source = limit('source', 2)
  memory.remember({ limit: source, count: { current: 3, ttlMs: 40_000 } })
  t.match(memory.exceeded([source]), { limit: source, count: { current: 3, ttlMs: 40_000 } })
  t.equal(memory.exceeded([{ ...source, max: 5 }]), null, 'a changed limit is another entry')
  nowMs += OVER_LIMIT_MEMORY_MS
  t.equal(memory.exceeded([source]), null, `forgotten after ${OVER_LIMIT_MEMORY_MS} ms: the store is asked again`)
  t.equal(memory.size, 0)
  memory.remember({ limit: source, count: { current: 3, ttlMs: 10 } })
  nowMs += 10
  t.equal(memory.exceeded([source]), null, 'never past the end of its window')
  memory.remember({ limit: limit('recipient', 1), count: { current: 2, ttlMs: 40_000 } })
  memory.remember({ limit: limit('key', 1), count: { current: 2, ttlMs: 40_000 } })
  t.equal(memory.size, 0, 'shared buckets are not remembered: the store decides for every caller')
  for (let i = 0; i < OVER_LIMIT_MEMORY_ENTRIES + 10; i++) memory.remember({ limit: { ...source, bucket: String(i) }, count: { current: 3, ttlMs: 40_000 } })
  t.equal(memory.size, OVER_LIMIT_MEMORY_ENTRIES, 'bounded: past the bound a refusal is not remembered')
  nowMs += OVER_LIMIT_MEMORY_MS
  memory.remember({ limit: source, count: { current: 3, ttlMs: 40_000 } })
  t.equal(memory.size, 1, 'expired entries make room')
})
