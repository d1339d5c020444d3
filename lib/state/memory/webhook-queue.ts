import {
  DEFAULT_PER_TENANT_CAP, claimFairly, deadLetterId, parseDeadLetterId, revived, tenantOf,
  type Backlog, type ClaimedDelivery, type DeadLetter, type DeadReason, type Delivery, type EnqueueResult, type OnceKey, type ReplayResult, type TenantRoom, type WebhookQueue, type WebhookQueueLimits
} from '../webhook-queue.js'

interface Held {
  delivery: Delivery
  consumer: string
  claimedAtMs: number
}

/** One tenant's share of the queue. */
class TenantQueue {
  readonly ready: Array<{ entryId: string, delivery: Delivery }> = []
  readonly held = new Map<string, Held>()
  /** Sorted by due time when read. */
  readonly retries: Array<{ dueMs: number, delivery: Delivery }> = []
  /** Oldest first. */
  readonly dead: DeadLetter[] = []

  get queued (): number {
    return this.ready.length + this.held.size + this.retries.length
  }

  get empty (): boolean {
    return this.queued === 0 && this.dead.length === 0
  }
}

export interface MemoryWebhookQueueOptions extends Partial<WebhookQueueLimits> {
  now?: () => number
}

/**
 * The webhook queue in one process (the embedded default). Nothing survives a restart: queued
 * and dead deliveries are lost with the process. Same semantics and per-tenant shares as the
 * Redis queue otherwise.
 */
export class MemoryWebhookQueue implements WebhookQueue {
  /** Only tenants with something queued or dead. */
  readonly #tenants = new Map<string, TenantQueue>()
  readonly #once = new Map<string, number>()
  readonly #perTenant: number
  readonly #now: () => number
  #sequence = 0
  /** Which tenant a claim offers first: each claim starts one further. */
  #turn = 0

  constructor (options: MemoryWebhookQueueOptions = {}) {
    this.#perTenant = options.perTenant ?? DEFAULT_PER_TENANT_CAP
    this.#now = options.now ?? Date.now
  }

  async enqueue (deliveries: readonly Delivery[], once?: OnceKey): Promise<EnqueueResult> {
    const tenant = tenantOf(deliveries)
    if (tenant === null) return { queued: false, overflowed: 0 }
    const now = this.#now()
    if (once !== undefined) {
      const until = this.#once.get(once.key)
      if (until !== undefined && until > now) return { queued: false, overflowed: 0 }
      for (const [key, expiry] of this.#once) if (expiry <= now) this.#once.delete(key)
      this.#once.set(once.key, now + once.ttlMs)
    }
    const queue = this.#queue(tenant)
    for (const delivery of deliveries) queue.ready.push({ entryId: this.#nextId(), delivery })
    return { queued: true, overflowed: this.#makeRoom(queue) }
  }

  async claim (consumer: string, max: number, stuckMs: number, room: TenantRoom = () => max): Promise<ClaimedDelivery[]> {
    const now = this.#now()
    const tenants = [...this.#tenants.keys()].filter((tenant) => (this.#tenants.get(tenant)?.queued ?? 0) > 0)
    const start = tenants.length === 0 ? 0 : this.#turn++ % tenants.length
    const inTurn = [...tenants.slice(start), ...tenants.slice(0, start)]
    return await claimFairly(inTurn, max, room, async (tenant, want) => this.#take(tenant, consumer, want, stuckMs, now))
  }

  async complete (consumer: string, claimed: ClaimedDelivery): Promise<void> {
    if (this.#release(consumer, claimed) !== undefined) this.#forgetIfEmpty(claimed.delivery.tenant)
  }

  async retry (consumer: string, claimed: ClaimedDelivery, delivery: Delivery, dueMs: number): Promise<void> {
    const queue = this.#release(consumer, claimed)
    queue?.retries.push({ dueMs, delivery })
  }

  async bury (consumer: string, claimed: ClaimedDelivery, delivery: Delivery): Promise<void> {
    const queue = this.#release(consumer, claimed)
    if (queue !== undefined) this.#bury(queue, delivery, 'failed')
  }

  async deadLetters (tenant: string | null, limit: number): Promise<DeadLetter[]> {
    const queues = tenant === null ? [...this.#tenants.values()] : [this.#tenants.get(tenant)].filter((queue) => queue !== undefined)
    // Newest first within a tenant, then merged by time (a stable sort keeps that order for ties).
    const letters = queues.flatMap((queue) => queue.dead.slice(-limit).reverse())
    return letters.sort((a, b) => b.deadAtMs - a.deadAtMs).slice(0, limit)
  }

  async replay (tenant: string | null, ids: readonly string[] | null): Promise<ReplayResult> {
    const result: ReplayResult = { replayed: 0, unknown: [], full: 0 }
    const now = this.#now()
    if (ids === null) {
      for (const [name, queue] of [...this.#tenants]) {
        if (tenant !== null && name !== tenant) continue
        while (queue.dead.length > 0 && queue.queued < this.#perTenant) {
          const letter = queue.dead.shift()
          if (letter !== undefined) this.#revive(queue, letter, now)
          result.replayed++
        }
        result.full += queue.dead.length
      }
      return result
    }
    for (const id of ids) {
      const parsed = parseDeadLetterId(id)
      const queue = parsed === null || (tenant !== null && parsed.tenant !== tenant) ? undefined : this.#tenants.get(parsed.tenant)
      const index = queue?.dead.findIndex((letter) => letter.id === id) ?? -1
      if (queue === undefined || index === -1) {
        result.unknown.push(id)
      } else if (queue.queued >= this.#perTenant) {
        result.full++
      } else {
        const [letter] = queue.dead.splice(index, 1)
        if (letter !== undefined) this.#revive(queue, letter, now)
        result.replayed++
      }
    }
    return result
  }

  async backlog (tenant: string): Promise<Backlog> {
    const queue = this.#tenants.get(tenant)
    if (queue === undefined) return { depth: 0, oldestCreatedAtMs: null }
    let oldest: number | null = null
    for (const { delivery } of [...queue.ready, ...queue.held.values(), ...queue.retries]) {
      if (oldest === null || delivery.createdAtMs < oldest) oldest = delivery.createdAtMs
    }
    return { depth: queue.queued, oldestCreatedAtMs: oldest }
  }

  async close (): Promise<void> {
    this.#tenants.clear()
    this.#once.clear()
  }

  #queue (tenant: string): TenantQueue {
    let queue = this.#tenants.get(tenant)
    if (queue === undefined) {
      queue = new TenantQueue()
      this.#tenants.set(tenant, queue)
    }
    return queue
  }

  #take (tenant: string, consumer: string, want: number, stuckMs: number, now: number): ClaimedDelivery[] {
    const queue = this.#tenants.get(tenant)
    if (queue === undefined) return []
    queue.retries.sort((a, b) => a.dueMs - b.dueMs)
    while ((queue.retries[0]?.dueMs ?? Infinity) <= now) {
      const due = queue.retries.shift()
      if (due !== undefined) queue.ready.push({ entryId: this.#nextId(), delivery: due.delivery })
    }
    const claimed: ClaimedDelivery[] = []
    for (const [entryId, held] of queue.held) {
      if (claimed.length >= want) break
      if (now - held.claimedAtMs < stuckMs) continue
      held.consumer = consumer
      held.claimedAtMs = now
      claimed.push({ entryId, delivery: held.delivery })
    }
    while (claimed.length < want) {
      const next = queue.ready.shift()
      if (next === undefined) break
      queue.held.set(next.entryId, { delivery: next.delivery, consumer, claimedAtMs: now })
      claimed.push(next)
    }
    return claimed
  }

  /**
   * Moves the tenant's longest-waiting deliveries to its dead letters until it holds at most
   * its cap: retries first (due last first: they failed most), then the oldest
   * never attempted. Held deliveries stay with their consumer.
   */
  #makeRoom (queue: TenantQueue): number {
    let over = queue.queued - this.#perTenant
    let moved = 0
    if (over > 0) queue.retries.sort((a, b) => a.dueMs - b.dueMs)
    while (over > 0) {
      const delivery = queue.retries.pop()?.delivery ?? queue.ready.shift()?.delivery
      if (delivery === undefined) break
      this.#bury(queue, delivery, 'overflow')
      over--
      moved++
    }
    return moved
  }

  #bury (queue: TenantQueue, delivery: Delivery, reason: DeadReason): void {
    queue.dead.push({ id: deadLetterId(delivery.tenant, this.#nextId()), deadAtMs: this.#now(), reason, delivery })
    while (queue.dead.length > this.#perTenant) queue.dead.shift()
  }

  #revive (queue: TenantQueue, letter: DeadLetter, now: number): void {
    queue.ready.push({ entryId: this.#nextId(), delivery: revived(letter.delivery, now) })
  }

  #nextId (): string {
    return `${this.#now()}-${this.#sequence++}`
  }

  /** The delivery's tenant queue when the consumer still held it (it may have been taken over since). */
  #release (consumer: string, claimed: ClaimedDelivery): TenantQueue | undefined {
    const queue = this.#tenants.get(claimed.delivery.tenant)
    const held = queue?.held.get(claimed.entryId)
    if (queue === undefined || held === undefined || held.consumer !== consumer) return undefined
    queue.held.delete(claimed.entryId)
    return queue
  }

  /** Forgets a tenant with nothing queued or dead, so the map holds only tenants with something. */
  #forgetIfEmpty (tenant: string): void {
    if (this.#tenants.get(tenant)?.empty === true) this.#tenants.delete(tenant)
  }
}
