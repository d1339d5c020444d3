import type { KeyMode } from '../../keys/api-keys.js'
import { storeCall } from '../../store-errors.js'
import type { RedisClient } from './client.js'
import { insightsBucketKey } from './keys.js'
import { WriteBehind } from './write-behind.js'
import { BUCKET_MS, bucketStart, type BucketCounts, type Granularity, type InsightsLimits, type InsightsStore, type RefusalStatus } from '../insights.js'

/** How long refusals are tallied in process before they are written: off the request path, about once a second. */
export const REFUSALS_FLUSH_MS = 1000
/** Tallies (tenant, mode, hour) waiting for the next write; past it a refusal is dropped and counted. */
export const MAX_PENDING_TALLIES = 10_000

interface Tally {
  tenantId: string
  mode: KeyMode
  atMs: number
  counts: Map<RefusalStatus, number>
}

/**
 * The funnel's buckets in Redis, shared by every instance. The verification log's script counts
 * its stories' events in them (lib/state/redis/verification-log.ts); this store reads them and
 * counts refusals: tallied in process per tenant, mode, hour and status (never an entry per
 * request) and written about once a second, one pipeline per tenant and mode (their buckets
 * share its slot) of an HINCRBY per status and a PEXPIREAT per bucket. A write that fails loses
 * its tally, counted in `dropped`, and is not tried again.
 */
export class RedisInsights implements InsightsStore {
  readonly #client: RedisClient
  readonly #retentionMs: number
  #pending = new Map<string, Tally>()
  readonly #schedule = new WriteBehind(REFUSALS_FLUSH_MS, () => this.#write())
  #dropped = 0

  constructor (client: RedisClient, limits: InsightsLimits) {
    this.#client = client
    this.#retentionMs = limits.retentionMs
  }

  refused (tenantId: string, mode: KeyMode, status: RefusalStatus, atMs: number): void {
    const hour = bucketStart('hour', atMs)
    // Length-prefixed: no tenant id can make two tallies one.
    const name = `${tenantId.length}:${tenantId}:${mode}:${hour}`
    let tally = this.#pending.get(name)
    if (tally === undefined) {
      if (this.#pending.size >= MAX_PENDING_TALLIES) {
        this.#dropped++
        return
      }
      tally = { tenantId, mode, atMs, counts: new Map() }
      this.#pending.set(name, tally)
    }
    tally.counts.set(status, (tally.counts.get(status) ?? 0) + 1)
    this.#schedule.queued()
  }

  async read (tenantId: string, mode: KeyMode, granularity: Granularity, startsMs: readonly number[]): Promise<BucketCounts[]> {
    if (startsMs.length === 0) return []
    const pipeline = this.#client.pipeline()
    for (const start of startsMs) pipeline.hgetall(insightsBucketKey(tenantId, mode, granularity, start / BUCKET_MS[granularity]))
    // A command's own error (the pipeline answered, that reply did not) is the store's failure too: a 503, not a 500.
    const replies = await storeCall('insights read', async () => (await pipeline.exec() ?? []).map(([error, fields]) => {
      if (error !== null) throw error
      return fields as Record<string, string>
    }))
    return replies.map((fields) => {
      const counts: BucketCounts = {}
      for (const [field, value] of Object.entries(fields)) counts[field] = Number(value)
      return counts
    })
  }

  async flush (): Promise<void> {
    await this.#schedule.flush()
  }

  dropped (): number {
    return this.#dropped
  }

  async close (): Promise<void> {
    await this.flush()
  }

  #write (): Array<Promise<void>> {
    const pending = this.#pending
    this.#pending = new Map()
    const scopes = new Map<string, Tally[]>()
    for (const tally of pending.values()) {
      const scope = `${tally.tenantId.length}:${tally.tenantId}:${tally.mode}`
      scopes.set(scope, [...(scopes.get(scope) ?? []), tally])
    }
    return [...scopes.values()].map((tallies) => {
      const pipeline = this.#client.pipeline()
      let counted = 0
      for (const { tenantId, mode, atMs, counts } of tallies) {
        for (const granularity of ['hour', 'day'] as const) {
          const start = bucketStart(granularity, atMs)
          const key = insightsBucketKey(tenantId, mode, granularity, start / BUCKET_MS[granularity])
          for (const [status, count] of counts) pipeline.hincrby(key, `refused:${status}`, count)
          pipeline.pexpireat(key, start + BUCKET_MS[granularity] + this.#retentionMs)
        }
        for (const count of counts.values()) counted += count
      }
      return pipeline.exec().then((replies) => {
        if (replies?.some(([error]) => error !== null) === true) this.#dropped += counted
      }, () => { this.#dropped += counted })
    })
  }
}
