import { TenantQueues } from './tenant-queues.js'

/**
 * The event loop's time for a CPU-heavy step (composing a message from a tenant's templates,
 * up to 330,000 characters a message), taken by tenants in turns. Requests are otherwise
 * served in the order their bytes arrive: a tenant with many admitted dispatches in flight
 * puts all their compositions in front of every other tenant's requests of the same moment.
 *
 * Steps run at once while no tenant waits and the steps of this turn of the event loop took
 * less than `quantumMs`. Past that, steps wait in one queue per tenant; each later turn of the
 * event loop (after the sockets have been read, so a tenant that just sent a request is in
 * the round) runs them one tenant after the other, one step each, until `quantumMs` is spent.
 * A tenant with one step waiting therefore waits for at most one step of each other waiting
 * tenant, however many those have queued. Who fills the queues: requests in flight, one
 * step each, so they are bounded by the connections.
 */
export class TenantTurns {
  readonly #quantumMs: number
  readonly #now: () => number
  readonly #waiting = new TenantQueues<() => void>()
  /** Time the steps of this turn of the event loop took. */
  #spentMs = 0
  #resetScheduled = false
  #pumpScheduled = false

  constructor (quantumMs: number, now: () => number = () => performance.now()) {
    this.#quantumMs = quantumMs
    this.#now = now
  }

  /** Runs `step` in the tenant's turn: at once when nobody waits and the turn has time left. */
  async run<T> (tenantId: string, step: () => T): Promise<T> {
    if (this.#waiting.tenants === 0 && this.#spentMs < this.#quantumMs) return this.#timed(step)
    return await new Promise<T>((resolve, reject) => {
      this.#waiting.push(tenantId, (): void => {
        try {
          resolve(this.#timed(step))
        } catch (error) {
          reject(error)
        }
      })
      this.#schedulePump()
    })
  }

  /** Steps waiting now, all tenants together. */
  get waiting (): number {
    return this.#waiting.size
  }

  #timed<T> (step: () => T): T {
    const started = this.#now()
    try {
      return step()
    } finally {
      this.#spentMs += this.#now() - started
      if (!this.#resetScheduled) {
        this.#resetScheduled = true
        setImmediate(() => {
          this.#resetScheduled = false
          this.#spentMs = 0
        })
      }
    }
  }

  #schedulePump (): void {
    if (this.#pumpScheduled) return
    this.#pumpScheduled = true
    setImmediate(() => { this.#pump() })
  }

  /** One round: a step of each waiting tenant in turn, until the quantum is spent. */
  #pump (): void {
    this.#pumpScheduled = false
    const started = this.#now()
    // At least one step a turn, whatever the quantum.
    for (let step = this.#waiting.next(); step !== undefined; step = this.#waiting.next()) {
      step()
      if (this.#now() - started >= this.#quantumMs) break
    }
    if (this.#waiting.tenants > 0) this.#schedulePump()
  }
}
