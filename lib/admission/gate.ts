import { errorCatalog, type ErrorCode } from '../../schemas/error-catalog.js'
import { quotaHeaders } from '../quota/allowance.js'
import type { AdmissionStore, Lane, DispatchPlan, Exceeded, LimitHit, Mailbox, MailboxLanes, RefusalPlan, VerifyPlan, WindowCount } from '../state/admission.js'
import type { QuotaDecision } from '../state/quota.js'
import { OverLimitMemory } from './over-limit.js'

/*
 * The admission gate: runs a request's plan as one atomic step on whatever holds the
 * counters (lib/state/memory/admission.ts in process, lib/state/redis/admission.ts as one script, one round trip),
 * and turns the counts into a decision and the headers to send. The stores only count; the
 * gate alone decides what is refused and what the answer says, as @fastify/rate-limit's
 * plugin does for its stores.
 */

export type Headers = Record<string, string>

/** A request the gate turns away, with the answer's code, message and headers. */
export interface Refusal {
  code: Extract<ErrorCode, 'RATE_LIMITED' | 'QUOTA_EXCEEDED' | 'RECIPIENT_SUPPRESSED'>
  message: string
  headers: Headers
}

export type DispatchDecision =
  | { kind: 'collision' }
  | { kind: 'refused', refusal: Refusal }
  /** The token is stored and one unit of allowance taken (`quota` says from which window). */
  | { kind: 'admitted', quota: QuotaDecision, headers: Headers }
  /**
   * Admitted as far as every counter is concerned, but the mailbox is suppressed: nothing is
   * to be sent, and the caller takes the token and the unit back as after a failed send.
   */
  | { kind: 'withheld', quota: QuotaDecision, headers: Headers }

/** `addressHash`: the tenant's keyed hash of the address the code was sent to (null for a record older than it). */
export type VerifyDecision =
  | { kind: 'refused', refusal: Refusal }
  | { kind: 'missing' | 'locked', headers: Headers }
  | { kind: 'verified', headers: Headers, addressHash: string | null }
  | { kind: 'mismatch', headers: Headers, lockStartedMs: number, addressHash: string | null }

function seconds (ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)))
}

/**
 * When a page is told to retry after meeting a locked mailbox or a bucket it may not hear about
 * (a recipient's, the key's, the mailbox cap): a constant, for all of them alike. The lock's own
 * length would tell the stranger who caused it exactly when to lock the mailbox again; a
 * bucket's would tell when other callers asked for codes; and any difference would tell which
 * of these it met.
 */
export const BROWSER_RETRY_SECONDS = 60

/** The one 429 a page gets for whatever it may not hear about (see BROWSER_RETRY_SECONDS). */
function browserRefusal (): Refusal {
  const retry = String(BROWSER_RETRY_SECONDS)
  return { code: 'RATE_LIMITED', message: `Too many requests; retry in ${retry} s`, headers: { 'retry-after': retry } }
}

/** What a limit's counter says in RateLimit-* headers, as @fastify/rate-limit sends them. */
function rateLimitHeaders (limit: LimitHit, count: WindowCount): Headers {
  return {
    'ratelimit-limit': String(limit.max),
    'ratelimit-remaining': String(Math.max(0, limit.max - count.current)),
    'ratelimit-reset': String(Math.ceil(count.ttlMs / 1000))
  }
}

/**
 * The limits a lane may hear about. A page only learns about its own source's bucket:
 * the others (a recipient's, the key's) are shared with other callers, and their counts would
 * tell it what those callers did.
 */
function audible (lane: Lane, limit: LimitHit): boolean {
  return lane === 'backend' || limit.name === 'source'
}

/**
 * The mailbox cap's 429 to a backend. The cap counts every tenant's codes to the mailbox, so
 * its own figures (its limit, the others' count, the second its window ends) would tell one
 * tenant what the others sent there and when. It answers in the shape of the tenant's own
 * recipient limit instead, with the cap's whole window as a coarse Retry-After: what is left
 * to learn is that a cap exists and was reached.
 */
function mailboxCapRefusal (cap: LimitHit, recipient: LimitHit | undefined): Refusal {
  const retry = seconds(cap.windowMs)
  return {
    code: 'RATE_LIMITED',
    message: `Too many requests for this recipient; retry in ${retry} s`,
    headers: { 'retry-after': retry, ...(recipient === undefined ? {} : { 'ratelimit-limit': String(recipient.max), 'ratelimit-remaining': '0', 'ratelimit-reset': retry }) }
  }
}

/** The 429 for a limit gone past; `limits`: the request's, among which the tenant's recipient limit. */
function limitRefusal (lane: Lane, { limit, count }: Exceeded, limits: readonly LimitHit[] = []): Refusal {
  if (!audible(lane, limit)) return browserRefusal()
  if (limit.name === 'mailbox') return mailboxCapRefusal(limit, limits.find((candidate) => candidate.name === 'recipient'))
  const retry = seconds(count.ttlMs)
  return {
    code: 'RATE_LIMITED',
    message: `Too many requests for this ${limit.name}; retry in ${retry} s`,
    headers: { 'retry-after': retry, ...rateLimitHeaders(limit, count), 'ratelimit-remaining': '0' }
  }
}

/** The RateLimit-* headers of the tightest limit the lane may hear about. */
function limitHeaders (lane: Lane, limits: readonly LimitHit[], counts: readonly WindowCount[]): Headers {
  let tightest: { limit: LimitHit, count: WindowCount, remaining: number } | null = null
  for (const [index, limit] of limits.entries()) {
    const count = counts[index]
    if (count === undefined || !audible(lane, limit)) continue
    const remaining = limit.max - count.current
    if (tightest === null || remaining < tightest.remaining) tightest = { limit, count, remaining }
  }
  return tightest === null ? {} : rateLimitHeaders(tightest.limit, tightest.count)
}

export class AdmissionGate {
  readonly #store: AdmissionStore
  /** For a store across the network: the caller's own buckets it found past their limit a moment ago. */
  readonly #overLimit: OverLimitMemory | null

  constructor (store: AdmissionStore, overLimit: OverLimitMemory | null = null) {
    this.#store = store
    this.#overLimit = overLimit
  }

  /**
   * The gate over the stores' admission counters. On Redis, sources just seen past their own
   * limit are refused in process for a moment, sparing a round trip per flood request; in
   * process the store answers as fast itself.
   */
  static over (stores: { kind: 'memory' | 'redis', admission: AdmissionStore }): AdmissionGate {
    return new AdmissionGate(stores.admission, stores.kind === 'redis' ? new OverLimitMemory() : null)
  }

  /** The store's 429, remembered for the caller's next requests. */
  #limited (lane: Lane, exceeded: Exceeded, limits: readonly LimitHit[] = []): Refusal {
    this.#overLimit?.remember(exceeded)
    return limitRefusal(lane, exceeded, limits)
  }

  /** A caller's own bucket remembered past its limit: the same 429 without a round trip. */
  #remembered (lane: Lane, limits: readonly LimitHit[]): Refusal | null {
    const exceeded = this.#overLimit?.exceeded(limits) ?? null
    return exceeded === null ? null : limitRefusal(lane, exceeded)
  }

  /**
   * The refusal a dispatch or verify of this caller would get first, when it is known without
   * the store (a bucket of the caller's own remembered past its limit): the service asks before
   * it computes the keyed hashes and the new code a refused request never uses.
   */
  refusedAtOnce (plan: RefusalPlan): Refusal | null {
    return this.#remembered(plan.lane, plan.limits)
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchDecision> {
    const { lane } = plan
    const remembered = this.#remembered(lane, plan.ownLimits)
    if (remembered !== null) return { kind: 'refused', refusal: remembered }
    const counts = await this.#store.dispatch(plan)
    if (counts.kind === 'collision') return counts
    if (counts.kind === 'limited') return { kind: 'refused', refusal: this.#limited(lane, counts.exceeded, [...plan.ownLimits, ...plan.sharedLimits]) }
    // A page's plan withholds instead (`withheld` below): only a backend hears the suppression.
    if (counts.kind === 'suppressed') return { kind: 'refused', refusal: { code: 'RECIPIENT_SUPPRESSED', message: errorCatalog.RECIPIENT_SUPPRESSED.message, headers: {} } }
    if (counts.kind === 'locked') {
      if (lane === 'browser') return { kind: 'refused', refusal: browserRefusal() }
      const retry = seconds(counts.lockedForMs)
      return { kind: 'refused', refusal: { code: 'RATE_LIMITED', message: `Too many wrong codes were entered for this address; retry in ${retry} s`, headers: { 'retry-after': retry } } }
    }
    const { quota } = counts
    const limits = [...plan.ownLimits, ...plan.sharedLimits]
    // A page never sees the tenant's billing volume.
    const headers = lane === 'backend'
      ? { ...limitHeaders(lane, limits, counts.counts), ...quotaHeaders(plan.quota.tenant.limit, quota, plan.quota.nowMs) }
      : limitHeaders(lane, limits, counts.counts)
    if (counts.kind === 'quota_exceeded') {
      const message = lane === 'backend'
        ? `The ${plan.quota.description} is used up until ${new Date(quota.resetMs).toISOString()}`
        : 'The allowance of this key is used up'
      return { kind: 'refused', refusal: { code: 'QUOTA_EXCEEDED', message, headers } }
    }
    return { kind: counts.kind === 'withheld' ? 'withheld' : 'admitted', quota, headers }
  }

  async verify (plan: VerifyPlan): Promise<VerifyDecision> {
    const remembered = this.#remembered(plan.lane, plan.ownLimits)
    if (remembered !== null) return { kind: 'refused', refusal: remembered }
    const counts = await this.#store.verify(plan)
    if (counts.kind === 'limited') return { kind: 'refused', refusal: this.#limited(plan.lane, counts.exceeded) }
    const headers = limitHeaders(plan.lane, [...plan.ownLimits, ...plan.sharedLimits], counts.counts)
    switch (counts.kind) {
      case 'mismatch': return { kind: 'mismatch', headers, lockStartedMs: counts.lockStartedMs, addressHash: counts.addressHash }
      case 'verified': return { kind: 'verified', headers, addressHash: counts.addressHash }
      default: return { kind: counts.kind, headers }
    }
  }

  /** Counts a request refused before admission; the 429 when that puts it past a limit. */
  async countRefused (plan: RefusalPlan): Promise<Refusal | null> {
    const remembered = this.#remembered(plan.lane, plan.limits)
    if (remembered !== null) return remembered
    const { exceeded } = await this.#store.count(plan)
    return exceeded === null ? null : this.#limited(plan.lane, exceeded)
  }

  async clearLockout (lanes: MailboxLanes): Promise<boolean> {
    return await this.#store.clearLockout(lanes)
  }

  async suppress (mailbox: Mailbox, ttlMs: number): Promise<boolean> {
    return await this.#store.suppress(mailbox, ttlMs)
  }

  async unsuppress (mailbox: Mailbox): Promise<boolean> {
    return await this.#store.unsuppress(mailbox)
  }

  /** After a failed delivery: the unit of its tenant's mailbox count an admitted dispatch took. */
  async refundMailboxCount (plan: DispatchPlan): Promise<void> {
    await this.#store.refundMailboxCount(plan)
  }
}
