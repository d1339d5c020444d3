import { timingSafeEqual } from 'node:crypto'
import { MemoryGuessCounter } from './lockout.js'
import { MemoryVelocityCounter } from './velocity.js'
import type { QuotaStore } from '../quota/quota-store.js'
import type { TokenStore } from '../tokens/token-store.js'
import { splitRecord, type Admission, type DispatchPlan, type DispatchVerdict, type LimitCount, type LimitHit, type VerifyPlan, type VerifyVerdict } from './admission.js'

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
export class MemoryAdmission implements Admission {
  readonly #velocity = new MemoryVelocityCounter(VELOCITY_BUCKETS)
  readonly #guesses = new MemoryGuessCounter()
  readonly #tokens: TokenStore
  readonly #quota: QuotaStore

  constructor (tokens: TokenStore, quota: QuotaStore) {
    this.#tokens = tokens
    this.#quota = quota
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchVerdict> {
    const { limits, lockout, quota, token } = plan
    const { counts, exceeded } = this.#hit(limits)
    const failures = this.#guesses.failures(lockout.key)
    if (failures.count >= lockout.threshold) return { kind: 'locked', counts, lockoutResetMs: failures.resetMs }
    if (exceeded) return { kind: 'limited', counts }
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

  async verify (plan: VerifyPlan): Promise<VerifyVerdict> {
    const { counts, exceeded } = this.#hit(plan.limits)
    if (exceeded) return { kind: 'limited', counts }
    const record = await this.#tokens.take(plan.tokenKey)
    if (record === null) return { kind: 'missing', counts }
    const { storedForm, recipientTag, addressHash } = splitRecord(record)
    let verified = false
    // Every form is compared, so timing does not tell which key matched.
    for (const form of plan.storedForms) if (sameForm(storedForm, form)) verified = true
    const lockoutKey = plan.lockout.keyPrefix + recipientTag
    if (verified) {
      this.#guesses.reset(lockoutKey)
      return { kind: 'verified', counts, addressHash }
    }
    this.#guesses.recordFailure(lockoutKey, plan.lockout.windowMs)
    const failures = this.#guesses.failures(lockoutKey)
    return { kind: 'mismatch', counts, addressHash, failures: failures.count, lockoutResetMs: failures.resetMs }
  }

  close (): void {
    this.#guesses.close()
  }

  #hit (limits: readonly LimitHit[]): { counts: LimitCount[], exceeded: boolean } {
    const counts: LimitCount[] = []
    let exceeded = false
    const now = Date.now()
    for (const { bucket, max, windowMs } of limits) {
      const count = this.#velocity.hit(bucket, windowMs, now)
      counts.push(count)
      if (count.current > max) exceeded = true
    }
    return { counts, exceeded }
  }
}
