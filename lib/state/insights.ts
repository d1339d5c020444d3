import type { KeyMode } from '../keys/api-keys.js'
import type { LaterEvent, VerificationEventType } from './verification-log.js'

/*
 * A tenant's funnel (GET /insights), counted per tenant and mode in hour and day buckets. A
 * bucket is a flat map of counters, the same fields in memory and on Redis:
 *   requested, sent, delivered, complained, locked, verified, receipt_redeemed
 *                          once per verification (a repeated SES notification counts once)
 *   delivery_failed:<reason>, bounced:<bounceType>   once per verification, by kind
 *   wrong_guess            once per verification: its first guess, when wrong and before a
 *                          right one (a guess uses the code up, so no later guess meets a code;
 *                          counting them would let anyone with a requestId, a page's visitor
 *                          included, raise the count without end)
 *   ttv:<bound>, ttd:<bound>   the histograms of time to verify and time to delivery
 *   refused:<status>       402, 403 and 429 answers to an identified key
 * A verification's events count in the buckets of the hour and the day it was requested in
 * (its cohort), whenever they happen, so that no bucket verifies more than it sent; a refusal,
 * which has no verification, counts in its own hour and day.
 */

export type Granularity = 'hour' | 'day'

export const BUCKET_MS: Readonly<Record<Granularity, number>> = { hour: 3_600_000, day: 86_400_000 }

/** The start of the bucket `atMs` falls in (UTC: epoch ms are UTC, and a day is whole hours). */
export function bucketStart (granularity: Granularity, atMs: number): number {
  const size = BUCKET_MS[granularity]
  return Math.floor(atMs / size) * size
}

/** The counters of one bucket by field; a field never counted is absent. */
export type BucketCounts = Record<string, number>

/** Types counted once per verification, the first time its story gets one. */
export const ONCE_COUNTED: readonly VerificationEventType[] = ['sent', 'delivered', 'complained', 'locked', 'verified', 'receipt_redeemed']

/** Types counted by one of their fields, once per verification. */
export const COUNTED_BY: Readonly<Partial<Record<VerificationEventType, 'reason' | 'bounceType'>>> = { delivery_failed: 'reason', bounced: 'bounceType' }

/**
 * The upper bounds (seconds) of the duration histograms' bins, Prometheus-style: a duration
 * counts in the first bin whose bound it does not exceed, and past the last in `inf`. Fixed: the
 * counts of every bucket ever written must add up bin by bin.
 */
export const DURATION_BOUNDS_SECONDS: readonly number[] = [1, 2, 3, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800, 3600]

export type DurationHistogram = 'ttv' | 'ttd'

/** The field of the bin a duration counts in: `ttv:5` (more than 3 s, at most 5 s), `ttv:inf`. */
export function durationField (histogram: DurationHistogram, ms: number): string {
  const seconds = Math.max(0, ms) / 1000
  const bound = DURATION_BOUNDS_SECONDS.find((upper) => seconds <= upper)
  return `${histogram}:${bound ?? 'inf'}`
}

/** What a story remembers for the funnel: when it was requested (its cohort) and when its mail was sent. */
export interface CohortTimes {
  requestedMs: number
  sentMs: number | null
}

/**
 * The counters one event of a story adds, given how many of its type the story has had with it
 * (1: the first). The in-process twin of the counting in VERIFICATION_LOG_LUA.
 */
export function eventFields (event: LaterEvent, countOfType: number, times: CohortTimes, verifiedBefore: boolean): string[] {
  if (countOfType !== 1) return []
  if (event.type === 'wrong_guess') return verifiedBefore ? [] : ['wrong_guess']
  if (event.type === 'delivery_failed') return [`delivery_failed:${event.reason}`]
  if (event.type === 'bounced') return [`bounced:${event.bounceType}`]
  if (!ONCE_COUNTED.includes(event.type)) return []
  const fields: string[] = [event.type]
  const atMs = Date.parse(event.at)
  if (times.sentMs !== null && event.type === 'verified') fields.push(durationField('ttv', atMs - times.sentMs))
  if (times.sentMs !== null && event.type === 'delivered') fields.push(durationField('ttd', atMs - times.sentMs))
  return fields
}

/** The answers counted as refusals, by status. */
export const REFUSAL_STATUSES = [402, 403, 429] as const
export type RefusalStatus = typeof REFUSAL_STATUSES[number]

export function isRefusalStatus (status: number): status is RefusalStatus {
  return (REFUSAL_STATUSES as readonly number[]).includes(status)
}

export interface InsightsLimits {
  /** How long a bucket is kept after its end. */
  retentionMs: number
}

/** INSIGHTS_DAYS' default. */
export const INSIGHTS_DEFAULTS: InsightsLimits = { retentionMs: 90 * 86_400_000 }

/**
 * The funnel's buckets. Counting is observational, like the verification log it rides on: the
 * log counts its stories' events in the same write (lib/state/verification-log.ts); `refused`
 * is never awaited, never throws, and a count lost (a write that failed) is counted in
 * `dropped`. Both implementations pass test/lib/state/insights.test.ts.
 */
export interface InsightsStore {
  /** A 402, 403 or 429 answered to a key of the tenant and mode, in the buckets of `atMs`. */
  refused (tenantId: string, mode: KeyMode, status: RefusalStatus, atMs: number): void
  /** The buckets starting at `startsMs` (each aligned to the granularity), in that order; `{}` for one with nothing kept. */
  read (tenantId: string, mode: KeyMode, granularity: Granularity, startsMs: readonly number[]): Promise<BucketCounts[]>
  /** Resolves once every refusal counted so far was written (or given up). */
  flush (): Promise<void>
  /** Refusal counts lost in a write that failed. */
  dropped (): number
  close (): Promise<void>
}
