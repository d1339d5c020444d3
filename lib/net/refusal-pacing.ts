import { LruMap } from 'toad-cache'

export interface RefusalPacingOptions {
  /** Refusals a second one source is answered at once, past its burst. */
  perSecond: number
  /** Refusals one source is answered at once before the pace applies. */
  burst: number
  /** The longest a refusal is held. */
  maxDelayMs: number
  /** Sources remembered at once; the least recently refused one is forgotten first. */
  maxSources: number
  /** Refusals held at once in the whole process; past it they are answered at once. */
  maxHeld: number
  now?: () => number
}

/**
 * How long to hold a refusal (401, 403, 429, and any 4xx of a route that asks for it:
 * plugins/refusal-pacing.ts) before sending it, per source address: a source that keeps asking
 * after it was refused gets its refusals at `perSecond` after a burst, whatever it sends. Every request costs the event loop the same whether it is admitted or not,
 * so without a pace a closed loop of refused requests from one tenant's callers takes as much of
 * the process as its connections can carry, and every other tenant's requests queue behind it.
 * Held, a refusal costs a timer and the connection it came on (the client waits for its
 * answer before sending the next): the flood slows to the pace instead of the service.
 *
 * The schedule is the generic cell rate algorithm: each source has a theoretical arrival time
 * that every refusal pushes one interval later; a refusal is held for as long as that time runs
 * ahead of now by more than the burst. The debt a source can build is bounded by `maxDelayMs`,
 * so it is answered at once again within the burst's worth of time after it stops.
 * Who fills it: every source that is refused, at most `maxSources` (forgetting one only lets it
 * be answered at once again); `maxHeld` bounds the timers and waiting answers in the process.
 */
export class RefusalPacer {
  readonly #intervalMs: number
  readonly #toleranceMs: number
  readonly #maxDelayMs: number
  readonly #maxHeld: number
  readonly #now: () => number
  /** Each source's theoretical arrival time, in ms of `now`. */
  readonly #arrivals: LruMap<number>
  readonly #held = new Set<() => void>()

  constructor (options: RefusalPacingOptions) {
    this.#intervalMs = 1000 / options.perSecond
    this.#toleranceMs = options.burst * this.#intervalMs
    this.#maxDelayMs = options.maxDelayMs
    this.#maxHeld = options.maxHeld
    this.#now = options.now ?? (() => performance.now())
    this.#arrivals = new LruMap<number>(options.maxSources)
  }

  /** How long this refusal to `source` is held (0: at once); counts it. */
  delayFor (source: string): number {
    const now = this.#now()
    const arrival = Math.max(this.#arrivals.get(source) ?? now, now)
    const delay = Math.min(this.#maxDelayMs, Math.max(0, arrival - this.#toleranceMs - now))
    this.#arrivals.set(source, Math.min(arrival + this.#intervalMs, now + this.#toleranceMs + this.#maxDelayMs))
    return delay
  }

  /**
   * Calls `then` once the refusal to `source` has waited out its delay: at once when there is
   * none or the process already holds `maxHeld`. `release` ends every hold (at shutdown, so
   * the close does not wait for them). True when it is held.
   */
  hold (source: string, then: () => void): boolean {
    const delay = this.delayFor(source)
    if (delay === 0 || this.#held.size >= this.#maxHeld) {
      then()
      return false
    }
    const done = (): void => {
      clearTimeout(timer)
      this.#held.delete(done)
      then()
    }
    const timer = setTimeout(done, delay)
    this.#held.add(done)
    return true
  }

  /** Refusals being held now. */
  get held (): number {
    return this.#held.size
  }

  release (): void {
    for (const done of [...this.#held]) done()
  }
}
