import { performance } from 'node:perf_hooks'
import { TenantQueues } from './tenant-queues.js'

/** The event loop's clock: wall time, and the part of it spent working (not waiting for I/O), in ms. */
export interface LoopClock {
  now: () => number
  activeMs: () => number
}

const processLoop: LoopClock = {
  now: () => performance.now(),
  activeMs: () => performance.eventLoopUtilization().active
}

export interface RequestTurnsOptions {
  /** Work a turn of the event loop does before a heavy tenant's requests wait. */
  quantumMs: number
  /** Above this share of the loop's recent time (0–1), heavy tenants' requests wait for it to fall. */
  busyShare: number
  /** How recent "recent" is: the time constant of the loop's average busy share. */
  busyWindowMs: number
  /** However busy the loop is, heavy tenants get a round of requests at least this often. */
  maxWaitMs: number
  /** The time constant of each tenant's average of requests in the service. */
  presenceWindowMs: number
}

/** `average` moved in time towards `held`, the value of the last `elapsedMs` (time constant `windowMs`). */
function timeAverage (average: number, held: number, elapsedMs: number, windowMs: number): number {
  const weight = Math.exp(-elapsedMs / windowMs)
  return average * weight + held * (1 - weight)
}

/** An average of requests in the service below which a tenant with none left counts as gone. */
const PRESENT = 0.01

/** Requests in the service now and lately. */
interface Load {
  /** Requests in the service now, waiting for their turn included. */
  count: number
  /** `count` on average lately, as of `at`. */
  average: number
  at: number
}

/** A tenant's load, and its requests that went on and are not answered yet (its share of the loop's work in progress). */
interface Presence extends Load {
  going: number
}

/**
 * How many requests each tenant has in the service, on average over the last `windowMs` or so
 * (an exponentially weighted average in time), and all tenants together. A tenant's requests
 * come and go in a millisecond while the loop has time, so a count of the moment would see a
 * calm tenant as gone most of the time; the average remembers it. A tenant is present from
 * its first request until, with none left in the service, its average has faded below
 * PRESENT (checked once per `windowMs`).
 */
class TenantPresence {
  readonly #windowMs: number
  readonly #now: () => number
  readonly #tenants = new Map<string, Presence>()
  /** All tenants together: the average of the sum is the sum of the averages. */
  readonly #all: Load
  #sweptAt: number

  constructor (windowMs: number, now: () => number) {
    this.#windowMs = windowMs
    this.#now = now
    this.#sweptAt = now()
    this.#all = { count: 0, average: 0, at: this.#sweptAt }
  }

  /** Counts a request in; its tenant's presence. */
  enter (tenantId: string): Presence {
    const now = this.#now()
    if (now - this.#sweptAt >= this.#windowMs) this.#sweep(now)
    let mine = this.#tenants.get(tenantId)
    if (mine === undefined) {
      mine = { count: 0, average: 0, at: now, going: 0 }
      this.#tenants.set(tenantId, mine)
    }
    this.#move(mine, 1, now)
    this.#move(this.#all, 1, now)
    return mine
  }

  leave (mine: Presence): void {
    const now = this.#now()
    this.#move(mine, -1, now)
    this.#move(this.#all, -1, now)
  }

  /**
   * The other present tenants' requests in the service, each: their average lately or, when
   * more, their count now; or null when the tenant is alone.
   */
  othersLoad (mine: Presence): number | null {
    const others = this.#tenants.size - 1
    if (others === 0) return null
    return Math.max(this.#all.average - mine.average, this.#all.count - mine.count, 0) / others
  }

  /** Brings the average up to `now` (the count held since the last move), then moves the count. */
  #move (presence: Load, by: number, now: number): void {
    presence.average = timeAverage(presence.average, presence.count, now - presence.at, this.#windowMs)
    presence.at = now
    presence.count += by
  }

  #sweep (now: number): void {
    this.#sweptAt = now
    for (const [tenantId, presence] of this.#tenants) {
      this.#move(presence, 0, now)
      if (presence.count === 0 && presence.average < PRESENT) this.#tenants.delete(tenantId)
    }
  }
}

/**
 * Tenants' turns at the event loop for their requests, once the loop is busy.
 *
 * Requests are otherwise served in the order their bytes arrive: a tenant with forty requests
 * in flight (a full bucket of dispatches at once) has the loop for forty requests' work before
 * another tenant's one request gets it, and every other tenant's requests wait while the loop
 * works through them. Here an authenticated request goes on at once while the loop has time:
 * no tenant waits, this turn of the loop has worked less than `quantumMs`, and the loop has
 * been busy less than `busyShare` of its recent time. Past that:
 *
 * - A request of a light tenant still goes on at once: one whose requests in the service
 *   (its average over about `presenceWindowMs`, or its count now when that is more) are no
 *   more than the other tenants have each (the same measure), or whose average is one at
 *   most (a calm tenant next to a flood, any tenant alone). Its requests never queue behind
 *   a heavier tenant's, however many those are. The count now makes a flood heavy the moment
 *   it comes, before its average has grown; the average keeps a calm tenant whose requests
 *   come and go in a millisecond counted between them.
 * - A heavy tenant keeps as many requests going (let on and not yet answered) as the other
 *   tenants have in the service each, one at least; the rest wait in its queue and go on,
 *   oldest first, as its own going requests are answered. So it takes no more of the loop's
 *   work in progress than any other tenant has, and a tenant found heavy for a moment (beside
 *   a flood still growing) is slowed to the pace of its own answers, not held: held to a
 *   round every `maxWaitMs`, a tenant whose requests come on their own schedule queued
 *   faster than it was let go, and its queue, counted among its requests, kept it heavy for
 *   seconds (`npm run bench:noisy`: the calm tenant's p99 ×68 to ×155 its baseline).
 *   Waiting requests count, so that a flood held to a few going still shows all it asks for.
 * - Beyond that, while the loop is below `busyShare`, each turn of the loop (after the
 *   sockets have been read) lets one waiting request of each heavy tenant go on, then more in
 *   rounds while the turn's work is under `quantumMs`; above it, one round every `maxWaitMs`.
 *
 * The work is the loop's own measure of its busy time (event-loop utilisation), not the time
 * spent inside this class: a request let go runs most of its work afterwards, in promises and
 * callbacks this class cannot time (its continuations, the mail it sends, its answer, the
 * garbage it leaves), and all of that counts against what comes next. Who fills the queues:
 * requests in the service, bounded by the connections (a waiting request holds its own). The
 * costly steps inside requests (composing a message) take turns by time as well (TenantTurns).
 */
export class TenantRequestTurns {
  readonly #options: RequestTurnsOptions
  readonly #clock: LoopClock
  readonly #waiting = new TenantQueues<() => void>()
  /** Per tenant with requests in the service now or lately: see TenantPresence. */
  readonly #presence: TenantPresence
  /** The loop's active time when this turn's accounting began; null when no turn is open. */
  #turnStartedAt: number | null = null
  #closeScheduled = false
  /** The loop's average busy share, as of `#sampledAt` (wall) and `#sampledActive` (active). */
  #busy = 0
  #sampledAt: number
  #sampledActive: number

  constructor (options: RequestTurnsOptions, clock: LoopClock = processLoop) {
    this.#options = options
    this.#clock = clock
    this.#presence = new TenantPresence(options.presenceWindowMs, clock.now)
    this.#sampledAt = clock.now()
    this.#sampledActive = clock.activeMs()
  }

  /**
   * Calls `proceed` at once, or in the tenant's turn. Returns what the caller calls once the
   * request is answered or its connection closed, whether it went on or still waits.
   */
  enter (tenantId: string, proceed: () => void): () => void {
    const mine = this.#presence.enter(tenantId)
    const active = this.#clock.activeMs()
    if (this.#turnStartedAt === null) this.#openTurn(active)
    if (!this.#waiting.has(tenantId) && this.#goesOnNow(mine, active)) {
      mine.going++
      proceed()
      return () => { this.#leave(tenantId, mine, true) }
    }
    let state: 'waiting' | 'going' | 'gone' = 'waiting'
    this.#waiting.push(tenantId, () => {
      if (state === 'waiting') {
        state = 'going'
        mine.going++
      }
      proceed()
    })
    this.#releaseOwn(tenantId, mine)
    return () => {
      this.#leave(tenantId, mine, state === 'going')
      state = 'gone'
    }
  }

  /** Requests waiting now, all tenants together. */
  get waiting (): number {
    return this.#waiting.size
  }

  #goesOnNow (mine: Presence, active: number): boolean {
    const others = this.#presence.othersLoad(mine)
    if (others === null || !(mine.average > 1 && Math.max(mine.average, mine.count) > others)) return true
    if (this.#waiting.tenants === 0 && active - (this.#turnStartedAt as number) < this.#options.quantumMs && this.#sampleBusy() < this.#options.busyShare) return true
    return mine.going < Math.max(1, others)
  }

  #leave (tenantId: string, mine: Presence, wentOn: boolean): void {
    this.#presence.leave(mine)
    if (!wentOn) return
    mine.going--
    if (this.#waiting.has(tenantId)) this.#releaseOwn(tenantId, mine)
  }

  /** The tenant's waiting requests, oldest first, for as long as a new one of its would go on at once. */
  #releaseOwn (tenantId: string, mine: Presence): void {
    while (this.#waiting.has(tenantId) && this.#goesOnNow(mine, this.#clock.activeMs())) this.#waiting.take(tenantId)?.()
  }

  /** The loop's busy share, an exponentially weighted average in time (time constant `busyWindowMs`). */
  #sampleBusy (): number {
    const now = this.#clock.now()
    const elapsed = now - this.#sampledAt
    if (elapsed > 0) {
      const active = this.#clock.activeMs()
      this.#busy = timeAverage(this.#busy, Math.min(1, (active - this.#sampledActive) / elapsed), elapsed, this.#options.busyWindowMs)
      this.#sampledAt = now
      this.#sampledActive = active
    }
    return this.#busy
  }

  /** Accounting from `active` on, closed in the next turn's check phase (after the sockets were read). */
  #openTurn (active: number): void {
    this.#turnStartedAt = active
    this.#scheduleClose(false)
  }

  /**
   * In the next turn, or after `maxWaitMs` when the loop is too busy to let anyone go: then
   * the loop sleeps meanwhile (a turn scheduled at once would keep it spinning, busy by its
   * own measure).
   */
  #scheduleClose (later: boolean): void {
    if (this.#closeScheduled) return
    this.#closeScheduled = true
    const close = (): void => {
      this.#closeScheduled = false
      this.#closeTurn(later)
    }
    if (later) setTimeout(close, this.#options.maxWaitMs)
    else setImmediate(close)
  }

  /**
   * While the loop has time to spare (or once `maxWaitMs` has passed without a round): one
   * request of each waiting tenant, then more in rounds while the work since the turn opened
   * (the last turn's released requests included) is under `quantumMs`.
   */
  #closeTurn (waited: boolean): void {
    const startedAt = this.#turnStartedAt ?? this.#clock.activeMs()
    this.#turnStartedAt = null
    // Sampled every turn, so that the average follows the loop while requests come.
    const spare = this.#sampleBusy() < this.#options.busyShare
    if (this.#waiting.tenants === 0) return
    if (!spare && !waited) {
      this.#scheduleClose(true)
      return
    }
    const round = this.#waiting.tenants
    for (let released = 0; this.#waiting.tenants > 0; released++) {
      if (released >= round && (!spare || this.#clock.activeMs() - startedAt >= this.#options.quantumMs)) break
      this.#waiting.next()?.()
    }
    if (this.#waiting.tenants > 0) this.#openTurn(this.#clock.activeMs())
  }
}
