import { performance } from 'node:perf_hooks'

/** How a busy event loop is told: its utilisation over the last window. */
export interface LoadProbe {
  /** True while the event loop has been busy at least `threshold` of the recent time. */
  busy (): boolean
}

/**
 * The event loop's utilisation (the share of its time not idle) over the last window, read
 * by a timer every `windowMs`: a window of a few tens of ms follows a flood's onset within a
 * few requests, and an idle moment ends the verdict as fast. The timer does not keep the
 * process alive; `stop` ends it.
 */
export class EventLoopProbe implements LoadProbe {
  readonly #timer: NodeJS.Timeout
  #busy = false

  constructor (threshold: number, windowMs: number) {
    let last = performance.eventLoopUtilization()
    this.#timer = setInterval(() => {
      const current = performance.eventLoopUtilization()
      this.#busy = performance.eventLoopUtilization(current, last).utilization >= threshold
      last = current
    }, windowMs).unref()
  }

  busy (): boolean {
    return this.#busy
  }

  stop (): void {
    clearInterval(this.#timer)
  }
}

/**
 * The process's requests, shared between tenants while the event loop is contended.
 *
 * Every turn of the event loop runs the ready steps of every request in flight, in the order
 * they became ready: a tenant with many requests in flight puts that many steps in front of
 * each step of another tenant's request. So, while the event loop is busy and another tenant
 * has requests too, a tenant past `perTenant` requests in flight waits for one of its own to
 * finish before the next one starts; the others' requests, fewer than that, start at once.
 * The cap costs nothing when it is not needed: a tenant alone, or a loop with time to spare,
 * runs as many requests as arrive.
 *
 * Who fills the queues: a tenant's own requests, one per connection, so they are bounded by
 * the connection limits; each waits only for its own tenant's requests, never another's.
 */
export class TenantShares {
  readonly #perTenant: number
  readonly #probe: LoadProbe
  readonly #inFlight = new Map<string, number>()
  readonly #waiting = new Map<string, Array<() => void>>()
  #waitingCount = 0

  constructor (perTenant: number, probe: LoadProbe) {
    if (!Number.isSafeInteger(perTenant) || perTenant < 1) throw new RangeError(`requests per tenant must be a positive integer, got ${perTenant}`)
    this.#perTenant = perTenant
    this.#probe = probe
  }

  /**
   * Takes a place for one of the tenant's requests: null when it may start at once (the
   * common case, with no promise to wait for), else a promise that resolves when it may.
   * Every place taken is given back with `leave`, once.
   */
  enter (tenantId: string): Promise<void> | null {
    const inFlight = this.#inFlight.get(tenantId) ?? 0
    if (this.#mayStart(tenantId, inFlight)) {
      this.#inFlight.set(tenantId, inFlight + 1)
      return null
    }
    return new Promise<void>((resolve) => {
      const queue = this.#waiting.get(tenantId)
      if (queue === undefined) this.#waiting.set(tenantId, [resolve])
      else queue.push(resolve)
      this.#waitingCount++
    })
  }

  /** Gives back a place the tenant took; its next waiting requests start if they may. */
  leave (tenantId: string): void {
    let inFlight = (this.#inFlight.get(tenantId) ?? 1) - 1
    const queue = this.#waiting.get(tenantId) ?? []
    const starting: Array<() => void> = []
    while (queue.length > 0 && this.#mayStart(tenantId, inFlight)) {
      starting.push(queue.shift() as () => void)
      inFlight++
    }
    if (queue.length === 0) this.#waiting.delete(tenantId)
    this.#waitingCount -= starting.length
    if (inFlight === 0) this.#inFlight.delete(tenantId)
    else this.#inFlight.set(tenantId, inFlight)
    for (const start of starting) start()
  }

  /** Requests waiting for a place now, all tenants together. */
  get waiting (): number {
    return this.#waitingCount
  }

  /**
   * Whether one more of the tenant's requests may start: always below the cap; past it, while
   * the event loop has time to spare, while no other tenant has requests in flight, or while
   * another has more in flight than this one (so the tenant that holds the most waits first).
   */
  #mayStart (tenantId: string, inFlight: number): boolean {
    if (inFlight < this.#perTenant || !this.#probe.busy()) return true
    let othersInFlight = false
    for (const [other, count] of this.#inFlight) {
      if (other === tenantId) continue
      if (count > inFlight) return true
      othersInFlight = true
    }
    return !othersInFlight
  }
}
