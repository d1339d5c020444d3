import { storeCall } from '../../store-errors.js'
import type { RedisClient } from './client.js'
import { WRITE_BEHIND_MS, WriteBehind } from './write-behind.js'
import { REPUTATION_PAUSED_KEY, reputationBucketKey } from './keys.js'
import { REPUTATION_BUCKET_MS, reputationBucket, windowBuckets, type ReputationCounts, type ReputationEvent, parsePause, type ReputationStore, type SendingPause } from '../reputation.js'

const EVENTS: readonly ReputationEvent[] = ['sent', 'bounced', 'complained']

/**
 * Counts and pauses in Redis, shared by every instance. A dispatch pays no round trip for its
 * count: `count` adds it to this process's tally, written WRITE_BEHIND_MS later with every count
 * tallied meanwhile, one increment per tenant, hour and kind (a pipeline per tenant: its hours
 * share a slot). Each hour's hash expires a window after its hour ended.
 */
export class RedisReputation implements ReputationStore {
  readonly #client: RedisClient
  readonly #windowMs: number
  /** tenant → `<hour>:<event>` → count not written yet. */
  #pending = new Map<string, Map<string, number>>()
  readonly #schedule = new WriteBehind(WRITE_BEHIND_MS, () => this.#write())

  constructor (client: RedisClient, { windowMs }: { windowMs: number }) {
    this.#client = client
    this.#windowMs = windowMs
  }

  count (tenantId: string, event: ReputationEvent, atMs: number): void {
    let tally = this.#pending.get(tenantId)
    if (tally === undefined) {
      tally = new Map()
      this.#pending.set(tenantId, tally)
    }
    const field = `${reputationBucket(atMs)}:${event}`
    tally.set(field, (tally.get(field) ?? 0) + 1)
    this.#schedule.queued()
  }

  async flush (): Promise<void> {
    await this.#schedule.flush()
  }

  async window (tenantId: string, nowMs: number): Promise<ReputationCounts> {
    await this.flush()
    const pipeline = this.#client.pipeline()
    for (const hour of windowBuckets(nowMs, this.#windowMs)) pipeline.hmget(reputationBucketKey(tenantId, hour), ...EVENTS)
    const replies = await storeCall('reputation read', async () => await pipeline.exec())
    const sums = { sent: 0, bounced: 0, complained: 0 }
    for (const [error, values] of replies ?? []) {
      if (error !== null) throw error
      EVENTS.forEach((event, index) => { sums[event] += Number((values as Array<string | null>)[index] ?? 0) })
    }
    return sums
  }

  async pause (tenantId: string, pause: SendingPause): Promise<boolean> {
    return await storeCall('reputation pause', async () => await this.#client.hsetnx(REPUTATION_PAUSED_KEY, tenantId, JSON.stringify(pause))) === 1
  }

  async paused (): Promise<Map<string, SendingPause>> {
    const fields = await storeCall('reputation pauses read', async () => await this.#client.hgetall(REPUTATION_PAUSED_KEY))
    return new Map(Object.entries(fields).map(([tenantId, json]) => [tenantId, parsePause(json)]))
  }

  async resume (tenantId: string, { forget, nowMs }: { forget: boolean, nowMs: number }): Promise<SendingPause | null> {
    const json = await storeCall('reputation resume', async () => {
      const [[, pause] = [null, null]] = await this.#client.multi().hget(REPUTATION_PAUSED_KEY, tenantId).hdel(REPUTATION_PAUSED_KEY, tenantId).exec() ?? []
      return pause as string | null
    })
    if (forget) {
      const hours = windowBuckets(nowMs, this.#windowMs).map((hour) => reputationBucketKey(tenantId, hour))
      await storeCall('reputation resume', async () => await this.#client.del(...hours))
    }
    return json === null ? null : parsePause(json)
  }

  async close (): Promise<void> {
    await this.flush()
  }

  #write (): Array<Promise<void>> {
    const pending = this.#pending
    this.#pending = new Map()
    return [...pending].map(([tenantId, tally]) => {
      const pipeline = this.#client.pipeline()
      for (const [field, count] of tally) {
        const [hour = '0', event = 'sent'] = field.split(':')
        const key = reputationBucketKey(tenantId, Number(hour))
        pipeline.hincrby(key, event, count)
        // Kept a window past its hour's end: no read of a window reaches further back.
        pipeline.pexpireat(key, (Number(hour) + 1) * REPUTATION_BUCKET_MS + this.#windowMs)
      }
      // A failed write loses these counts, never a dispatch: the rate is a little less exact.
      return pipeline.exec().then(() => {}, () => {})
    })
  }
}
