import { timingSafeEqual } from 'node:crypto'
import type { QuotaStore } from '../quota/quota-store.js'
import type { MemoryTokenStore } from '../tokens/memory-token-store.js'
import { splitRecord } from '../tokens/token-store.js'
import type { AdmissionStore, DispatchCounts, Exceeded, VerifyCounts } from './gate.js'
import { MemoryGuessCounter } from './lockout.js'
import type { DispatchPlan, LimitHit, VerifyPlan } from './plan.js'
import { MemoryVelocityCounter, type WindowCount } from './velocity.js'

/** Velocity buckets kept in process; past this many the least recently seen are forgotten. */
const VELOCITY_BUCKETS = 100_000

function sameForm (stored: string, candidate: string): boolean {
  const a = Buffer.from(stored)
  const b = Buffer.from(candidate)
  return a.length === b.length && timingSafeEqual(a, b)
}

/**
 * Admission in one process (the embedded default), with the same decisions as the Redis
 * scripts, over this process's velocity, lockout, quota and token stores.
 */
export class MemoryAdmission implements AdmissionStore {
  readonly #velocity = new MemoryVelocityCounter(VELOCITY_BUCKETS)
  readonly #guesses = new MemoryGuessCounter()
  readonly #tokens: MemoryTokenStore
  readonly #quota: QuotaStore

  constructor (tokens: MemoryTokenStore, quota: QuotaStore) {
    this.#tokens = tokens
    this.#quota = quota
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchCounts> {
    const { limits, lockout, quota, token } = plan
    const { counts, exceeded } = this.#hit(limits)
    const failures = this.#guesses.failures(lockout.key)
    if (failures.count >= lockout.threshold) return { kind: 'locked', counts, lockoutResetMs: failures.resetMs }
    if (exceeded !== null) return { kind: 'limited', counts, exceeded }
    const decision = await this.#quota.reserve(quota.scope, quota.limit, quota.window, quota.nowMs)
    if (!decision.allowed) return { kind: 'quota_exceeded', counts, quota: decision }
    // The token comes last, as in the Redis script, but unlike the script this can fail after
    // the unit is taken (a taken requestId, a full store): the unit is given back.
    let stored: boolean
    try {
      stored = await this.#tokens.put(token.key, token.record, token.ttlMs)
    } catch (error) {
      await this.#quota.refund(quota.scope, decision.windowId)
      throw error
    }
    if (!stored) {
      await this.#quota.refund(quota.scope, decision.windowId)
      return { kind: 'collision' }
    }
    return { kind: 'issued', counts, quota: decision }
  }

  async verify (plan: VerifyPlan): Promise<VerifyCounts> {
    const { counts, exceeded } = this.#hit(plan.limits)
    if (exceeded !== null) return { kind: 'limited', counts, exceeded }
    const record = await this.#tokens.take(plan.tokenKey)
    if (record === null) return { kind: 'missing', counts }
    const { storedForm, recipientTag } = splitRecord(record)
    let verified = false
    // Every form is compared, so timing does not tell which key matched.
    for (const form of plan.storedForms) if (sameForm(storedForm, form)) verified = true
    const lockoutKey = plan.lockout.keyPrefix + recipientTag
    if (verified) this.#guesses.reset(lockoutKey)
    else this.#guesses.recordFailure(lockoutKey, plan.lockout.windowMs)
    return { kind: verified ? 'verified' : 'mismatch', counts }
  }

  close (): void {
    this.#guesses.close()
  }

  #hit (limits: readonly LimitHit[]): { counts: WindowCount[], exceeded: Exceeded | null } {
    const counts: WindowCount[] = []
    let exceeded: Exceeded | null = null
    const now = Date.now()
    for (const limit of limits) {
      const count = this.#velocity.hit(limit.bucket, limit.windowMs, now)
      counts.push(count)
      if (exceeded === null && count.current > limit.max) exceeded = { limit, count }
    }
    return { counts, exceeded }
  }
}
