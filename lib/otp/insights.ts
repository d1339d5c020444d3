import type { KeyMode } from '../keys/api-keys.js'
import { apiError } from '../errors.js'
import { BUCKET_MS, bucketStart, DURATION_BOUNDS_SECONDS, type BucketCounts, type DurationHistogram, type Granularity, type InsightsStore } from '../state/insights.js'
import { DELIVERY_FAILURE_REASONS, REFUSED_STATUSES } from '../../schemas/insights.js'

/** The most buckets one answer has: a week of hours, 400 days (INSIGHTS_DAYS' bound). */
export const MAX_BUCKETS: Readonly<Record<Granularity, number>> = { hour: 168, day: 400 }

/** The range when not given: the last 24 hours by the hour, the last 30 days by the day. */
const DEFAULT_SPAN_MS: Readonly<Record<Granularity, number>> = { hour: 86_400_000, day: 30 * 86_400_000 }

export interface InsightsQuery {
  granularity?: Granularity | undefined
  from?: string | undefined
  to?: string | undefined
}

export interface DurationSummary {
  p50: number
  p90: number
  count: number
}

export interface Funnel {
  requested: number
  sent: number
  deliveryFailed: Record<string, number>
  delivered: number
  bounced: { permanent: number, transient: number }
  complained: number
  verified: number
  wrongGuesses: number
  locked: number
  receiptsRedeemed: number
  refused: Record<string, number>
  conversion: number | null
  timeToVerify: DurationSummary | null
  timeToDelivery: DurationSummary | null
}

export interface InsightsView {
  granularity: Granularity
  from: string
  to: string
  dataStart: string
  buckets: Array<{ start: string } & Funnel>
  totals: Funnel
}

const RFC_3339 = /^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))$/

/** An RFC 3339 date-time as epoch ms, or null when it is not one (or names no real day: 02-30, 00-00). */
export function parseDateTime (text: string): number | null {
  const match = RFC_3339.exec(text)
  if (match === null) return null
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map(Number) as [number, number, number, number, number, number]
  const offset = match[8] === undefined ? 0 : (match[8] === '-' ? -1 : 1) * (Number(match[9]) * 60 + Number(match[10]))
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59 || Math.abs(offset) > 23 * 60 + 59) return null
  const date = new Date(0)
  // setUTCFullYear, not Date.UTC: the latter reads years 0 to 99 as 1900 to 1999.
  date.setUTCFullYear(year, month - 1, day)
  if (date.getUTCDate() !== day) return null
  date.setUTCHours(hour, minute, second, Math.floor(Number(`0${match[7] ?? ''}`) * 1000))
  return date.getTime() - offset * 60_000
}

/**
 * The bin-by-bin estimate of a quantile (seconds), as Prometheus' histogram_quantile makes it:
 * linear inside the bin the rank falls in (from 0 in the first), the last finite bound when it
 * falls past it.
 */
export function histogramQuantile (q: number, bins: readonly number[]): number {
  const total = bins.reduce((sum, n) => sum + n, 0)
  const rank = q * total
  let below = 0
  for (const [index, n] of bins.entries()) {
    if (below + n >= rank && n > 0) {
      const upper = DURATION_BOUNDS_SECONDS[index]
      if (upper === undefined) break
      const lower = index === 0 ? 0 : DURATION_BOUNDS_SECONDS[index - 1] ?? 0
      return lower + (upper - lower) * (rank - below) / n
    }
    below += n
  }
  return DURATION_BOUNDS_SECONDS[DURATION_BOUNDS_SECONDS.length - 1] ?? 0
}

/** A histogram's bins in order (the finite bounds, then `inf`) from a bucket's counters. */
function bins (counts: BucketCounts, histogram: DurationHistogram): number[] {
  return [...DURATION_BOUNDS_SECONDS.map(String), 'inf'].map((bound) => counts[`${histogram}:${bound}`] ?? 0)
}

function summary (counts: BucketCounts, histogram: DurationHistogram): DurationSummary | null {
  const binned = bins(counts, histogram)
  const total = binned.reduce((sum, n) => sum + n, 0)
  if (total === 0) return null
  const round = (seconds: number): number => Math.round(seconds * 1000) / 1000
  return { p50: round(histogramQuantile(0.5, binned)), p90: round(histogramQuantile(0.9, binned)), count: total }
}

/** The answer's fields from a bucket's counters (or the sum of several). */
export function funnelOf (counts: BucketCounts): Funnel {
  const n = (field: string): number => counts[field] ?? 0
  const deliveryFailed: Record<string, number> = Object.fromEntries(DELIVERY_FAILURE_REASONS.map((reason) => [reason, n(`delivery_failed:${reason}`)]))
  // A reason this version does not know (written by a newer instance) is still a failure.
  for (const [field, value] of Object.entries(counts)) {
    if (field.startsWith('delivery_failed:') && !(DELIVERY_FAILURE_REASONS as readonly string[]).includes(field.slice('delivery_failed:'.length))) deliveryFailed.unknown = (deliveryFailed.unknown ?? 0) + value
  }
  const sent = n('sent')
  const timeToVerify = summary(counts, 'ttv')
  return {
    requested: n('requested'),
    sent,
    deliveryFailed,
    delivered: n('delivered'),
    bounced: { permanent: n('bounced:permanent'), transient: n('bounced:transient') },
    complained: n('complained'),
    verified: n('verified'),
    wrongGuesses: n('wrong_guess'),
    locked: n('locked'),
    receiptsRedeemed: n('receipt_redeemed'),
    refused: Object.fromEntries(REFUSED_STATUSES.map((status) => [status, n(`refused:${status}`)])),
    // Verified after a send (the histogram's count) over sent: a review address's verification, which sent nothing, is not a conversion.
    conversion: sent === 0 ? null : (timeToVerify?.count ?? 0) / sent,
    timeToVerify,
    timeToDelivery: summary(counts, 'ttd')
  }
}

function invalid (message: string): Error {
  return apiError('INSIGHTS_RANGE_INVALID', message)
}

/**
 * A tenant's funnel in one mode over a range (GET /insights): every bucket of the range, zeros
 * included, and the totals, read from the key's own tenant and mode only.
 */
export class InsightsReports {
  readonly #store: Pick<InsightsStore, 'read'>
  readonly #retentionMs: number
  /**
   * Tenants with a report being made in this process: one at a time each. A long range costs
   * the event loop a few milliseconds to read and answer; a tenant's keys asking hundreds at once
   * held every tenant's requests for most of a second. Another ask meanwhile is a 429 at once.
   */
  readonly #reporting = new Set<string>()

  constructor (store: Pick<InsightsStore, 'read'>, { retentionMs }: { retentionMs: number }) {
    this.#store = store
    this.#retentionMs = retentionMs
  }

  async report (tenantId: string, mode: KeyMode, query: InsightsQuery, nowMs = Date.now()): Promise<InsightsView> {
    if (this.#reporting.has(tenantId)) {
      throw apiError('RATE_LIMITED', 'Another insights read of this tenant is being answered; retry once it is done', { 'retry-after': '1' })
    }
    this.#reporting.add(tenantId)
    try {
      return await this.#report(tenantId, mode, query, nowMs)
    } finally {
      this.#reporting.delete(tenantId)
    }
  }

  async #report (tenantId: string, mode: KeyMode, query: InsightsQuery, nowMs: number): Promise<InsightsView> {
    const granularity = query.granularity ?? 'day'
    const size = BUCKET_MS[granularity]
    const instant = (name: string, text: string): number => {
      const ms = parseDateTime(text)
      if (ms === null) throw invalid(`${name} must be an RFC 3339 date-time, such as 2026-11-28T00:00:00Z`)
      return ms
    }
    const toMs = query.to === undefined ? nowMs : instant('to', query.to)
    const fromMs = query.from === undefined ? toMs - DEFAULT_SPAN_MS[granularity] : instant('from', query.from)
    if (fromMs >= toMs) throw invalid('from must be before to')
    // The first bucket that starts within retention: every one from it on is still kept whole.
    const dataStart = Math.ceil((nowMs - this.#retentionMs) / size) * size
    if (toMs <= dataStart) throw invalid(`the range ends before the oldest data kept (${new Date(dataStart).toISOString()}; INSIGHTS_DAYS)`)
    if (toMs > nowMs + this.#retentionMs) throw invalid('the range ends further ahead than INSIGHTS_DAYS')
    const first = Math.max(bucketStart(granularity, fromMs), dataStart)
    const count = Math.ceil((toMs - first) / size)
    if (count > MAX_BUCKETS[granularity]) throw apiError('INSIGHTS_RANGE_TOO_LONG', `At most ${MAX_BUCKETS[granularity]} ${granularity} buckets per answer; this range has ${count}`)
    const starts = Array.from({ length: count }, (_, index) => first + index * size)
    const read = await this.#store.read(tenantId, mode, granularity, starts)
    const sums: BucketCounts = {}
    const buckets = starts.map((start, index) => {
      const counts = read[index] ?? {}
      for (const [field, value] of Object.entries(counts)) sums[field] = (sums[field] ?? 0) + value
      return { start: new Date(start).toISOString(), ...funnelOf(counts) }
    })
    return {
      granularity,
      from: new Date(first).toISOString(),
      to: new Date(first + count * size).toISOString(),
      dataStart: new Date(dataStart).toISOString(),
      buckets,
      totals: funnelOf(sums)
    }
  }
}
