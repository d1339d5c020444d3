import { TenantQueues } from './tenant-queues.js'

/**
 * Tenants' turns at the event loop for their requests, once the loop is saturated.
 *
 * Requests are otherwise served in the order their bytes arrive: a tenant with forty requests
 * in flight (a full bucket of dispatches at once) has the loop for forty requests' work before
 * another tenant's one request gets it. Here an authenticated request goes on at once while no
 * tenant waits and this turn of the event loop has spent less than `quantumMs` since its first
 * request came here. Past that, requests wait in one queue per tenant, and each later turn of
 * the event loop (after the sockets have been read, so a tenant that just sent a request is in
 * the round) lets one request of each waiting tenant go on: a tenant with one request waiting
 * waits for one request of each other waiting tenant, however many those have queued. A
 * tenant waiting alone has all its requests let go in the next turn. Who fills the queues:
 * requests in flight, bounded by the connections.
 *
 * The share is one request per tenant per turn, not time: a request's own work runs after it
 * is let go, in promises this class cannot time. The costly steps inside requests (composing
 * a message) take turns by time as well (TenantTurns).
 */
export class TenantRequestTurns {
  readonly #quantumMs: number
  readonly #now: () => number
  readonly #waiting = new TenantQueues<() => void>()
  /** When the first request of this turn of the event loop came here; null between turns. */
  #turnStartedAt: number | null = null
  #pumpScheduled = false

  constructor (quantumMs: number, now: () => number = () => performance.now()) {
    this.#quantumMs = quantumMs
    this.#now = now
  }

  /** Calls `proceed` at once, or in the tenant's turn. */
  enter (tenantId: string, proceed: () => void): void {
    const now = this.#now()
    if (this.#turnStartedAt === null) {
      this.#turnStartedAt = now
      setImmediate(() => { this.#turnStartedAt = null })
    }
    if (this.#waiting.tenants === 0 && now - this.#turnStartedAt < this.#quantumMs) {
      proceed()
      return
    }
    this.#waiting.push(tenantId, proceed)
    this.#schedulePump()
  }

  /** Requests waiting now, all tenants together. */
  get waiting (): number {
    return this.#waiting.size
  }

  #schedulePump (): void {
    if (this.#pumpScheduled) return
    this.#pumpScheduled = true
    setImmediate(() => { this.#pump() })
  }

  /**
   * One round: one request of each waiting tenant; all of them when one tenant waits alone,
   * since there is nobody to be fair to (one a turn would cost a lone tenant at 50 requests in
   * flight 60% of its throughput on Redis, where the requests let go together share one write).
   */
  #pump (): void {
    this.#pumpScheduled = false
    const round = this.#waiting.tenants
    if (round === 1) {
      for (const proceed of this.#waiting.drain()) proceed()
      return
    }
    for (let turn = 0; turn < round; turn++) this.#waiting.next()?.()
    if (this.#waiting.tenants > 0) this.#schedulePump()
  }
}
