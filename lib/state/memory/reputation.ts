import { REPUTATION_BUCKET_MS, reputationBucket, windowBuckets, type ReputationCounts, type ReputationEvent, type ReputationStore, type SendingPause } from '../reputation.js'

/** Each tenant's hourly counts and pauses in this process: lost on a restart, which lifts every pause. */
export class MemoryReputation implements ReputationStore {
  readonly #windowMs: number
  readonly #buckets = new Map<string, Map<number, ReputationCounts>>()
  readonly #paused = new Map<string, SendingPause>()

  constructor ({ windowMs }: { windowMs: number }) {
    this.#windowMs = windowMs
  }

  count (tenantId: string, event: ReputationEvent, atMs: number): void {
    let buckets = this.#buckets.get(tenantId)
    if (buckets === undefined) {
      buckets = new Map()
      this.#buckets.set(tenantId, buckets)
    }
    const hour = reputationBucket(atMs)
    let counts = buckets.get(hour)
    if (counts === undefined) {
      counts = { sent: 0, bounced: 0, complained: 0 }
      buckets.set(hour, counts)
      // A new hour is when the hours past the window are dropped: a tenant holds a window's worth at most.
      const oldest = hour - Math.round(this.#windowMs / REPUTATION_BUCKET_MS)
      for (const past of buckets.keys()) if (past <= oldest) buckets.delete(past)
    }
    counts[event]++
  }

  async flush (): Promise<void> {}

  async window (tenantId: string, nowMs: number): Promise<ReputationCounts> {
    const sums = { sent: 0, bounced: 0, complained: 0 }
    const buckets = this.#buckets.get(tenantId)
    if (buckets === undefined) return sums
    for (const hour of windowBuckets(nowMs, this.#windowMs)) {
      const counts = buckets.get(hour)
      if (counts === undefined) continue
      sums.sent += counts.sent
      sums.bounced += counts.bounced
      sums.complained += counts.complained
    }
    return sums
  }

  async pause (tenantId: string, pause: SendingPause): Promise<boolean> {
    if (this.#paused.has(tenantId)) return false
    this.#paused.set(tenantId, pause)
    return true
  }

  async paused (): Promise<Map<string, SendingPause>> {
    return new Map(this.#paused)
  }

  async resume (tenantId: string, { forget }: { forget: boolean, nowMs: number }): Promise<SendingPause | null> {
    const pause = this.#paused.get(tenantId) ?? null
    this.#paused.delete(tenantId)
    if (forget) this.#buckets.delete(tenantId)
    return pause
  }

  async close (): Promise<void> {}
}
