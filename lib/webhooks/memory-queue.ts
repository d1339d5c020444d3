import { DEAD_LETTER_CAP, revived, type ClaimedDelivery, type DeadLetter, type Delivery, type OnceKey, type WebhookQueue } from './queue.js'

interface Held {
  delivery: Delivery
  consumer: string
  claimedAtMs: number
}

export interface MemoryWebhookQueueOptions {
  /** Deliveries waiting, held or due for retry; past it, enqueue fails (and the event is logged as lost). */
  maxDeliveries?: number
  now?: () => number
}

/**
 * The webhook queue in one process (the embedded default). Nothing survives a restart: queued
 * and dead deliveries are lost with the process. Same semantics as the Redis queue otherwise.
 */
export class MemoryWebhookQueue implements WebhookQueue {
  readonly #ready: Array<{ entryId: string, delivery: Delivery }> = []
  readonly #held = new Map<string, Held>()
  readonly #retries: Array<{ dueMs: number, delivery: Delivery }> = []
  readonly #dead: DeadLetter[] = []
  readonly #once = new Map<string, number>()
  readonly #maxDeliveries: number
  readonly #now: () => number
  #sequence = 0

  constructor (options: MemoryWebhookQueueOptions = {}) {
    this.#maxDeliveries = options.maxDeliveries ?? 100_000
    this.#now = options.now ?? Date.now
  }

  async enqueue (deliveries: readonly Delivery[], once?: OnceKey): Promise<boolean> {
    const now = this.#now()
    if (once !== undefined) {
      const until = this.#once.get(once.key)
      if (until !== undefined && until > now) return false
      for (const [key, expiry] of this.#once) if (expiry <= now) this.#once.delete(key)
    }
    if (this.#ready.length + this.#held.size + this.#retries.length + deliveries.length > this.#maxDeliveries) {
      throw new Error(`the in-memory webhook queue holds ${this.#maxDeliveries} deliveries already`)
    }
    if (once !== undefined) this.#once.set(once.key, now + once.ttlMs)
    for (const delivery of deliveries) this.#push(delivery)
    return true
  }

  async claim (consumer: string, max: number, stuckMs: number): Promise<ClaimedDelivery[]> {
    const now = this.#now()
    this.#retries.sort((a, b) => a.dueMs - b.dueMs)
    while (this.#retries.length > 0 && (this.#retries[0]?.dueMs ?? Infinity) <= now) {
      const due = this.#retries.shift()
      if (due !== undefined) this.#push(due.delivery)
    }
    const claimed: ClaimedDelivery[] = []
    for (const [entryId, held] of this.#held) {
      if (claimed.length >= max) break
      if (now - held.claimedAtMs < stuckMs) continue
      held.consumer = consumer
      held.claimedAtMs = now
      claimed.push({ entryId, delivery: held.delivery })
    }
    while (claimed.length < max) {
      const next = this.#ready.shift()
      if (next === undefined) break
      this.#held.set(next.entryId, { delivery: next.delivery, consumer, claimedAtMs: now })
      claimed.push(next)
    }
    return claimed
  }

  async complete (consumer: string, claimed: ClaimedDelivery): Promise<void> {
    this.#release(consumer, claimed)
  }

  async retry (consumer: string, claimed: ClaimedDelivery, delivery: Delivery, dueMs: number): Promise<void> {
    if (this.#release(consumer, claimed)) this.#retries.push({ dueMs, delivery })
  }

  async bury (consumer: string, claimed: ClaimedDelivery, delivery: Delivery): Promise<void> {
    if (!this.#release(consumer, claimed)) return
    this.#dead.push({ id: this.#nextId(), deadAtMs: this.#now(), delivery })
    if (this.#dead.length > DEAD_LETTER_CAP) this.#dead.shift()
  }

  async deadLetters (limit: number): Promise<DeadLetter[]> {
    return this.#dead.slice(-limit).reverse()
  }

  async replay (ids: readonly string[] | null): Promise<number> {
    const wanted = ids === null ? null : new Set(ids)
    const now = this.#now()
    let replayed = 0
    for (let index = this.#dead.length - 1; index >= 0; index--) {
      const letter = this.#dead[index]
      if (letter === undefined || (wanted !== null && !wanted.has(letter.id))) continue
      this.#dead.splice(index, 1)
      this.#push(revived(letter.delivery, now))
      replayed++
    }
    return replayed
  }

  async close (): Promise<void> {
    this.#ready.length = 0
    this.#held.clear()
    this.#retries.length = 0
  }

  #push (delivery: Delivery): void {
    this.#ready.push({ entryId: this.#nextId(), delivery })
  }

  #nextId (): string {
    return `${this.#now()}-${this.#sequence++}`
  }

  /** Whether the consumer still held the delivery (it may have been taken over since). */
  #release (consumer: string, claimed: ClaimedDelivery): boolean {
    const held = this.#held.get(claimed.entryId)
    if (held === undefined || held.consumer !== consumer) return false
    this.#held.delete(claimed.entryId)
    return true
  }
}
