import { randomInt } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'

/** A tenant's live sends kept, whatever their outcome. */
export const SENDS_KEPT = 64
/** A tenant's failed live sends kept, apart, so that a run of sent mail does not push them out. */
export const FAILURES_KEPT = 16
/** How long a failed send stands for what a failure takes now; older, the tenant's sends do. */
export const FAILURE_FRESH_MS = 10 * 60_000

/** The last `capacity` durations, each with when it was taken. */
class Ring {
  readonly #durations: Float64Array
  readonly #takenAt: Float64Array
  #next = 0
  #size = 0

  constructor (capacity: number) {
    this.#durations = new Float64Array(capacity)
    this.#takenAt = new Float64Array(capacity)
  }

  add (ms: number, at: number): void {
    this.#durations[this.#next] = ms
    this.#takenAt[this.#next] = at
    this.#next = (this.#next + 1) % this.#durations.length
    this.#size = Math.min(this.#size + 1, this.#durations.length)
  }

  /** The durations taken at `since` or later. */
  since (since: number): number[] {
    const found: number[] = []
    for (let index = 0; index < this.#size; index++) {
      if ((this.#takenAt[index] ?? -Infinity) >= since) found.push(this.#durations[index] ?? 0)
    }
    return found
  }
}

interface TenantRoundTrips {
  sends: Ring
  failures: Ring
}

export interface RoundTripsOptions {
  /** Milliseconds on a monotonic clock. */
  now?: () => number
  /** An index below `count`, uniformly drawn. */
  pick?: (count: number) => number
  wait?: (ms: number) => Promise<void>
}

/**
 * How long the provider round trips of a tenant's live mail took lately in this process, and
 * a wait drawn from them: what a dispatch whose mail is withheld (a page's dispatch to a
 * suppressed mailbox, which must answer as a failed delivery does) spends instead of a send,
 * so that its answer comes when a failed send's would. A draw comes from the tenant's failed
 * sends of the last FAILURE_FRESH_MS (a failure is what the answer imitates, and a provider
 * refuses sooner than it accepts: an SMTP relay refuses a recipient before the message is
 * sent), else from its last sends of any outcome (what its provider takes now).
 *
 * Per tenant, so that no tenant's mail (a slow template, a tarpitting recipient) sets how long
 * another's answers wait, and bounded: a tenant holds two small rings of numbers, nothing per
 * address. A tenant with no live send yet in this process has nothing to imitate and does not
 * wait.
 */
export class RoundTrips {
  readonly #tenants = new Map<string, TenantRoundTrips>()
  readonly #now: () => number
  readonly #pick: (count: number) => number
  readonly #wait: (ms: number) => Promise<void>

  constructor (options: RoundTripsOptions = {}) {
    this.#now = options.now ?? (() => performance.now())
    this.#pick = options.pick ?? randomInt
    this.#wait = options.wait ?? (async (ms) => { await sleep(ms) })
  }

  /** A live send of `tenantId` took `ms`, and was accepted or failed. */
  record (tenantId: string, ms: number, failed: boolean): void {
    let kept = this.#tenants.get(tenantId)
    if (kept === undefined) {
      kept = { sends: new Ring(SENDS_KEPT), failures: new Ring(FAILURES_KEPT) }
      this.#tenants.set(tenantId, kept)
    }
    const at = this.#now()
    kept.sends.add(ms, at)
    if (failed) kept.failures.add(ms, at)
  }

  /** A duration a send of `tenantId` would take now; null when it has not sent live mail yet. */
  draw (tenantId: string): number | null {
    const kept = this.#tenants.get(tenantId)
    if (kept === undefined) return null
    const fresh = kept.failures.since(this.#now() - FAILURE_FRESH_MS)
    const pool = fresh.length > 0 ? fresh : kept.sends.since(-Infinity)
    return pool[this.#pick(pool.length)] ?? null
  }

  /** Waits as long as a send of `tenantId` would take now (see draw). */
  async imitate (tenantId: string): Promise<void> {
    const ms = this.draw(tenantId)
    if (ms !== null && ms > 0) await this.#wait(ms)
  }
}
