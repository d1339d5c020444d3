import { setImmediate as nextTurn } from 'node:timers/promises'
import { threadCpuMs } from '../mail/templating/liquid.js'

/**
 * The most units of work the loader does in one turn of the event loop. A unit is one entry of
 * a list whose length the file sets (a blocked network, a denied domain, a key's origin, a key)
 * put through one step: checked against the schema, hashed, or added to a set. The costliest
 * step, parsing a network, took about 3 µs of CPU a unit on a loaded 2-core machine, so a turn
 * of list work stays near 6 ms there ([performance](../../docs/performance.md)).
 */
export const LOAD_TURN_UNITS = 2_000

/**
 * The turns of one load: the units each counts (`take`, before the work) and, measured, the CPU
 * time each took on the loader's thread. A turn ends wherever the loader yields: after a tenant,
 * after a template part, or when its units are spent.
 */
export class LoadTurns {
  #units = 0
  /** Turns the load took; the event loop ran between them. */
  count = 0
  /** The most units one turn counted: at most LOAD_TURN_UNITS. */
  longestUnits = 0
  /** The most CPU time one turn took on the loader's thread, in milliseconds. */
  longestCpuMs = 0

  /** Runs one turn's work and records its units and its CPU time. */
  run<T> (work: () => T): T {
    const start = threadCpuMs()
    try {
      return work()
    } finally {
      this.count++
      this.longestUnits = Math.max(this.longestUnits, this.#units)
      this.longestCpuMs = Math.max(this.longestCpuMs, threadCpuMs() - start)
      this.#units = 0
    }
  }

  /** Counts `units` about to be done, ending the turn first when they do not fit in what is left of it. */
  * take (units = 1): Generator<void, void, void> {
    if (this.#units > 0 && this.#units + units > LOAD_TURN_UNITS) yield
    this.#units += units
  }

  /** Runs steps to their end, letting the event loop turn between them. */
  async inTurns<T> (steps: Generator<void, T, void>): Promise<T> {
    for (;;) {
      const step = this.run(() => steps.next())
      if (step.done === true) return step.value
      await nextTurn()
    }
  }

  /** Runs steps to their end at once (a command-line check, the built-in tenant). */
  atOnce<T> (steps: Generator<void, T, void>): T {
    for (;;) {
      const step = this.run(() => steps.next())
      if (step.done === true) return step.value
    }
  }
}
