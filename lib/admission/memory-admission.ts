import { timingSafeEqual } from 'node:crypto'
import type { MemoryQuotaStore } from '../quota/memory-quota-store.js'
import type { MemoryTokenStore } from '../tokens/memory-token-store.js'
import { splitRecord } from '../tokens/token-store.js'
import type { AdmissionStore, DispatchCounts, Exceeded, VerifyCounts } from './gate.js'
import { MemoryLockout } from './lockout.js'
import { quotaClaims, type DispatchPlan, type LimitHit, type RefusalPlan, type VerifyPlan } from './plan.js'
import { MemoryVelocityCounter, type WindowCount } from './velocity.js'

/** Velocity buckets kept in process; past this many the least recently seen are forgotten. */
const VELOCITY_BUCKETS = 100_000
/** Mailboxes whose run of failures is kept in process, least recently touched forgotten first. */
const LOCKOUT_MAILBOXES = 100_000

function sameForm (stored: string, candidate: string): boolean {
  const a = Buffer.from(stored)
  const b = Buffer.from(candidate)
  return a.length === b.length && timingSafeEqual(a, b)
}

/**
 * Admission in one process (the embedded default), with the same decisions as the Redis
 * scripts, over this process's velocity, lockout, quota and token stores. Each step runs to
 * completion without yielding, so it is as atomic as a script.
 */
export class MemoryAdmission implements AdmissionStore {
  readonly #velocity = new MemoryVelocityCounter(VELOCITY_BUCKETS)
  readonly #lockout = new MemoryLockout(LOCKOUT_MAILBOXES)
  readonly #tokens: MemoryTokenStore
  readonly #quota: MemoryQuotaStore

  constructor (tokens: MemoryTokenStore, quota: MemoryQuotaStore) {
    this.#tokens = tokens
    this.#quota = quota
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchCounts> {
    const { limits, mailbox, lockoutKey, quota, token } = plan
    const now = Date.now()
    const { counts, exceeded } = this.#hit(limits, now)
    const lockedForMs = this.#lockout.lockedFor(lockoutKey, now)
    if (lockedForMs > 0) return { kind: 'locked', counts, lockedForMs }
    if (exceeded !== null) return { kind: 'limited', counts, exceeded }
    if (mailbox !== null) {
      const count = this.#velocity.hit(mailbox.bucket, mailbox.windowMs, now)
      if (count.current > mailbox.max) return { kind: 'limited', counts, exceeded: { limit: mailbox, count } }
    }
    const claims = quotaClaims(quota)
    const decision = this.#quota.reserveAll(claims, quota.nowMs)
    if (!decision.allowed) return { kind: 'quota_exceeded', counts, quota: decision }
    // The token comes last, as in the Redis script, but unlike the script this can fail after
    // the units are taken (a full store, a taken requestId): they are given back.
    const refund = async (): Promise<void> => { for (const claim of claims) await this.#quota.refund(claim.scope, decision.windowId, claim.share) }
    let stored: boolean
    try {
      stored = await this.#tokens.put(token.key, token.record, token.ttlMs)
    } catch (error) {
      await refund()
      throw error
    }
    if (!stored) {
      await refund()
      return { kind: 'collision' }
    }
    return { kind: 'issued', counts, quota: decision }
  }

  async verify (plan: VerifyPlan): Promise<VerifyCounts> {
    const now = Date.now()
    const { counts, exceeded } = this.#hit(plan.limits, now)
    if (exceeded !== null) return { kind: 'limited', counts, exceeded }
    const record = await this.#tokens.take(plan.tokenKey)
    if (record === null) return { kind: 'missing', counts }
    const { storedForm, recipientTag, addressHash } = splitRecord(record)
    const lockoutKey = plan.lockout.keyPrefix + recipientTag
    if (this.#lockout.lockedFor(lockoutKey, now) > 0) return { kind: 'locked', counts }
    let verified = false
    // Every form is compared, so timing does not tell which key matched.
    for (const form of plan.storedForms) if (sameForm(storedForm, form)) verified = true
    if (verified) {
      this.#lockout.clear(lockoutKey)
      return { kind: 'verified', counts, addressHash }
    }
    return { kind: 'mismatch', counts, lockStartedMs: this.#lockout.recordFailure(lockoutKey, plan.lockout.policy, now), addressHash }
  }

  async count (plan: RefusalPlan): Promise<{ counts: WindowCount[], exceeded: Exceeded | null }> {
    return this.#hit(plan.limits, Date.now())
  }

  async clearLockout (key: string): Promise<boolean> {
    return this.#lockout.clear(key)
  }

  /** Counts the limits in order, up to the first one exceeded. */
  #hit (limits: readonly LimitHit[], now: number): { counts: WindowCount[], exceeded: Exceeded | null } {
    const counts: WindowCount[] = []
    for (const limit of limits) {
      const count = this.#velocity.hit(limit.bucket, limit.windowMs, now)
      counts.push(count)
      if (count.current > limit.max) return { counts, exceeded: { limit, count } }
    }
    return { counts, exceeded: null }
  }
}
