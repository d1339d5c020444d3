/**
 * How long events and counts that no request waits for (verification stories, the funnel, the
 * sending reputation) gather in process before they go to Redis. A write costs Redis and this
 * process more than the entries it carries: written each turn of the event loop, a busy instance
 * sent one or two per dispatch, and a dispatch cost Redis twice the CPU it costs without them
 * (docs/performance.md). Gathered for this long, a write carries the entries of many requests;
 * a story or a count reaches the other instances this much later.
 */
export const WRITE_BEHIND_MS = 10

/**
 * When a write-behind buffer is written: `delayMs` after the first entry since the last write, at
 * once when the owner says the buffer is full enough, and on flush, which also waits for every
 * write still out (close and reads that must see this instance's own entries use it).
 */
export class WriteBehind {
  readonly #delayMs: number
  readonly #write: () => Array<Promise<void>>
  #timer: NodeJS.Timeout | null = null
  readonly #writing = new Set<Promise<void>>()

  /** `write` takes everything buffered and returns its writes, each settled (never rejected). */
  constructor (delayMs: number, write: () => Array<Promise<void>>) {
    this.#delayMs = delayMs
    this.#write = write
  }

  /** An entry was buffered: its write is scheduled, or made now when `full`. */
  queued (full = false): void {
    if (full) {
      this.#run()
      return
    }
    if (this.#timer === null) {
      this.#timer = setTimeout(() => { this.#run() }, this.#delayMs)
      // A process that ends without close loses at most this wait's entries, as it would a turn's.
      this.#timer.unref()
    }
  }

  async flush (): Promise<void> {
    if (this.#timer !== null) this.#run()
    await Promise.all([...this.#writing])
  }

  #run (): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer)
      this.#timer = null
    }
    for (const write of this.#write()) {
      this.#writing.add(write)
      void write.finally(() => { this.#writing.delete(write) })
    }
  }
}
