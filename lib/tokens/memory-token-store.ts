import { StoreFullError } from '../store-errors.js'
import type { TokenStore } from './token-store.js'

export interface MemoryTokenStoreOptions {
  maxTokens: number
  sweepIntervalMs?: number
  now?: () => number
}

// A sweep tick stops after this many live entries, so one tick never blocks the event loop
// for long however many tokens are stored.
const SWEEP_LIVE_BUDGET = 1024

/**
 * Tokens in one process. Each entry is a single string `expiresAt|record` (one object per
 * token keeps the heap small at a million tokens). Map order is insertion order, and
 * insertion order is nearly expiry order, so the sweep walks from the oldest entry.
 */
export class MemoryTokenStore implements TokenStore {
  readonly #entries = new Map<string, string>()
  readonly #maxTokens: number
  readonly #now: () => number
  readonly #timer: NodeJS.Timeout

  constructor (options: MemoryTokenStoreOptions) {
    this.#maxTokens = options.maxTokens
    this.#now = options.now ?? Date.now
    this.#timer = setInterval(() => { this.sweep(SWEEP_LIVE_BUDGET) }, options.sweepIntervalMs ?? 1000)
    this.#timer.unref()
  }

  get size (): number {
    return this.#entries.size
  }

  async put (key: string, record: string, ttlMs: number): Promise<boolean> {
    const now = this.#now()
    const existing = this.#entries.get(key)
    if (existing !== undefined && expiresAt(existing) > now) return false
    if (this.#entries.size >= this.#maxTokens && existing === undefined) {
      this.sweep(Number.POSITIVE_INFINITY)
      if (this.#entries.size >= this.#maxTokens) throw new StoreFullError()
    }
    // Re-inserting moves the key to the end, keeping the map in expiry order for the sweep.
    this.#entries.delete(key)
    this.#entries.set(flat(key), flat(`${now + ttlMs}|${record}`))
    return true
  }

  async take (key: string): Promise<string | null> {
    const entry = this.#entries.get(key)
    if (entry === undefined) return null
    this.#entries.delete(key)
    const separator = entry.indexOf('|')
    return Number(entry.slice(0, separator)) > this.#now() ? entry.slice(separator + 1) : null
  }

  async delete (key: string): Promise<void> {
    this.#entries.delete(key)
  }

  /** Drops expired entries from the oldest on, until `liveBudget` live ones were passed. */
  sweep (liveBudget: number): number {
    const now = this.#now()
    let removed = 0
    let live = 0
    for (const [key, entry] of this.#entries) {
      if (expiresAt(entry) <= now) {
        this.#entries.delete(key)
        removed++
      } else if (++live >= liveBudget) {
        break
      }
    }
    return removed
  }

  async ready (): Promise<boolean> {
    return this.#entries.size < this.#maxTokens
  }

  async close (): Promise<void> {
    clearInterval(this.#timer)
    this.#entries.clear()
  }
}

/**
 * A copy of an ASCII string in one flat piece. Concatenations and slices are kept by V8 as
 * trees of references to their parts (a recipient tag keeps its whole digest alive), which
 * more than doubled the heap per stored token.
 */
function flat (value: string): string {
  return Buffer.from(value, 'latin1').toString('latin1')
}

function expiresAt (entry: string): number {
  return Number(entry.slice(0, entry.indexOf('|')))
}
