import type { KeyMode } from '../../keys/api-keys.js'
import { tenantScope } from '../../keys/scope.js'
import { BUCKET_MS, bucketStart, type BucketCounts, type Granularity, type InsightsLimits, type InsightsStore, type RefusalStatus } from '../insights.js'

/** A scope's buckets of one granularity by start, each its counters. */
type Buckets = Map<number, Map<string, number>>

/**
 * The funnel's buckets in process, per tenant and mode: the same fields as on Redis, counted at
 * once (there is no round trip to save). A scope's buckets past retention are dropped when it
 * opens a new one, so a scope holds at most retention's worth of hours and days.
 */
export class MemoryInsights implements InsightsStore {
  readonly #scopes = new Map<string, Record<Granularity, Buckets>>()
  readonly #retentionMs: number
  readonly #now: () => number

  constructor (limits: InsightsLimits, options: { now?: () => number } = {}) {
    this.#retentionMs = limits.retentionMs
    this.#now = options.now ?? Date.now
  }

  /** Adds one to each field in the hour and the day of `atMs` (the verification log's counts, and refusals). */
  count (tenantId: string, mode: KeyMode, atMs: number, fields: readonly string[]): void {
    if (fields.length === 0) return
    const scope = tenantScope(tenantId, mode)
    let buckets = this.#scopes.get(scope)
    if (buckets === undefined) {
      buckets = { hour: new Map(), day: new Map() }
      this.#scopes.set(scope, buckets)
    }
    for (const granularity of ['hour', 'day'] as const) {
      const start = bucketStart(granularity, atMs)
      if (this.#gone(granularity, start)) continue
      const table = buckets[granularity]
      let counts = table.get(start)
      if (counts === undefined) {
        counts = new Map()
        table.set(start, counts)
        for (const kept of table.keys()) if (this.#gone(granularity, kept)) table.delete(kept)
      }
      for (const field of fields) counts.set(field, (counts.get(field) ?? 0) + 1)
    }
  }

  refused (tenantId: string, mode: KeyMode, status: RefusalStatus, atMs: number): void {
    this.count(tenantId, mode, atMs, [`refused:${status}`])
  }

  async read (tenantId: string, mode: KeyMode, granularity: Granularity, startsMs: readonly number[]): Promise<BucketCounts[]> {
    const table = this.#scopes.get(tenantScope(tenantId, mode))?.[granularity]
    return startsMs.map((start) => {
      const counts = table?.get(start)
      return counts === undefined || this.#gone(granularity, start) ? {} : Object.fromEntries(counts)
    })
  }

  async flush (): Promise<void> {}

  dropped (): number {
    return 0
  }

  async close (): Promise<void> {
    this.#scopes.clear()
  }

  /** A bucket is kept for the retention after its end, as on Redis. */
  #gone (granularity: Granularity, start: number): boolean {
    return start + BUCKET_MS[granularity] + this.#retentionMs <= this.#now()
  }
}
