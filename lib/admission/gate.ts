import type { ErrorCode } from '../../schemas/error-catalog.js'
import { quotaHeaders } from '../quota/allowance.js'
import type { QuotaDecision } from '../quota/quota-store.js'
import type { DispatchPlan, LimitHit, VerifyPlan } from './plan.js'
import type { WindowCount } from './velocity.js'

/*
 * The admission gate: runs a request's plan as one atomic step on whatever holds the
 * counters (memory-admission.ts in process, redis-admission.ts as one script, one round trip),
 * and turns the counts into a decision and the headers to send. The stores only count; the
 * gate alone decides what is refused and what the answer says, as @fastify/rate-limit's
 * plugin does for its stores.
 */

/** The first limit a request went past, and its count. */
export interface Exceeded {
  limit: LimitHit
  count: WindowCount
}

/** What a store reports for a dispatch, counted and written atomically. */
export type DispatchCounts =
  /** The requestId is taken (a 128-bit coincidence): nothing was counted; mint another. */
  | { kind: 'collision' }
  | { kind: 'locked', counts: WindowCount[], lockoutResetMs: number }
  | { kind: 'limited', counts: WindowCount[], exceeded: Exceeded }
  | { kind: 'quota_exceeded', counts: WindowCount[], quota: QuotaDecision }
  | { kind: 'issued', counts: WindowCount[], quota: QuotaDecision }

/** What a store reports for a verify. */
export type VerifyCounts =
  | { kind: 'limited', counts: WindowCount[], exceeded: Exceeded }
  /** No such token (never issued, expired, used, another tenant's): nothing else changed. */
  | { kind: 'missing', counts: WindowCount[] }
  | { kind: 'mismatch', counts: WindowCount[] }
  | { kind: 'verified', counts: WindowCount[] }

/** Runs a plan atomically: one script on Redis, shared by every instance; in process otherwise. */
export interface AdmissionStore {
  dispatch (plan: DispatchPlan): Promise<DispatchCounts>
  verify (plan: VerifyPlan): Promise<VerifyCounts>
}

export type Headers = Record<string, string>

/** A request the gate turns away, with the answer's code, message and headers. */
export interface Refusal {
  code: Extract<ErrorCode, 'RATE_LIMITED' | 'QUOTA_EXCEEDED'>
  message: string
  headers: Headers
}

export type DispatchDecision =
  | { kind: 'collision' }
  | { kind: 'refused', refusal: Refusal }
  /** The token is stored and one unit of allowance taken (`quota` says from which window). */
  | { kind: 'admitted', quota: QuotaDecision, headers: Headers }

export type VerifyDecision =
  | { kind: 'refused', refusal: Refusal }
  | { kind: 'verified' | 'mismatch' | 'missing', headers: Headers }

function seconds (ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)))
}

/** The 429 for a limit gone past, with the headers @fastify/rate-limit sends with one. */
function limitRefusal ({ limit, count }: Exceeded): Refusal {
  const retry = String(Math.ceil(count.ttlMs / 1000))
  return {
    code: 'RATE_LIMITED',
    message: `Too many requests for this ${limit.name}; retry in ${retry} s`,
    headers: { 'retry-after': retry, 'ratelimit-limit': String(limit.max), 'ratelimit-remaining': '0', 'ratelimit-reset': retry }
  }
}

/** The RateLimit-* headers of the tightest limit, the reset in whole seconds. */
function limitHeaders (limits: readonly LimitHit[], counts: readonly WindowCount[]): Headers {
  let tightest: { max: number, remaining: number, ttlMs: number } | null = null
  for (const [index, limit] of limits.entries()) {
    const count = counts[index]
    if (count === undefined) continue
    const remaining = Math.max(0, limit.max - count.current)
    if (tightest === null || remaining < tightest.remaining) tightest = { max: limit.max, remaining, ttlMs: count.ttlMs }
  }
  if (tightest === null) return {}
  return { 'ratelimit-limit': String(tightest.max), 'ratelimit-remaining': String(tightest.remaining), 'ratelimit-reset': String(Math.ceil(tightest.ttlMs / 1000)) }
}

export class AdmissionGate {
  readonly #store: AdmissionStore

  constructor (store: AdmissionStore) {
    this.#store = store
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchDecision> {
    const counts = await this.#store.dispatch(plan)
    if (counts.kind === 'collision') return counts
    if (counts.kind === 'locked') {
      const retry = seconds(counts.lockoutResetMs)
      return { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: `Too many wrong codes were entered for this address; retry in ${retry} s`, headers: { 'retry-after': retry } } }
    }
    if (counts.kind === 'limited') return { kind: 'refused', refusal: limitRefusal(counts.exceeded) }
    const headers = limitHeaders(plan.limits, counts.counts)
    const { quota } = counts
    const allowance = quotaHeaders(plan.quota.limit, quota, plan.quota.nowMs)
    if (counts.kind === 'quota_exceeded') {
      return {
        kind: 'refused',
        refusal: { code: 'QUOTA_EXCEEDED', message: `The ${plan.quota.description} is used up until ${new Date(quota.resetMs).toISOString()}`, headers: { ...headers, ...allowance } }
      }
    }
    return { kind: 'admitted', quota, headers: { ...headers, ...allowance } }
  }

  async verify (plan: VerifyPlan): Promise<VerifyDecision> {
    const counts = await this.#store.verify(plan)
    if (counts.kind === 'limited') return { kind: 'refused', refusal: limitRefusal(counts.exceeded) }
    return { kind: counts.kind, headers: limitHeaders(plan.limits, counts.counts) }
  }
}
