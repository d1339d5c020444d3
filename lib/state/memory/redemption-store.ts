import { StoreFullError } from '../../store-errors.js'
import { assertRedemption, newEpoch, type Redemption, type RedemptionStore } from '../redemptions.js'

export interface MemoryRedemptionStoreOptions {
  /** Past this many unexpired entries, redeem fails (503) rather than grow without bound. */
  maxEntries?: number
  sweepIntervalMs?: number
  now?: () => number
}

/**
 * Redeemed receipts in one process (the embedded default). Entries are kept until their
 * receipt expires; a sweep drops expired ones from the oldest (insertion order is nearly
 * expiry order, receipts all living RECEIPT_TTL_SECONDS). They are lost with the process, so
 * the epoch is the process's own: a receipt issued before a restart never redeems after it.
 */
export class MemoryRedemptionStore implements RedemptionStore {
  readonly #epoch = newEpoch()
  readonly #expiries = new Map<string, number>()
  readonly #maxEntries: number
  readonly #now: () => number
  readonly #timer: NodeJS.Timeout

  constructor (options: MemoryRedemptionStoreOptions = {}) {
    this.#maxEntries = options.maxEntries ?? 1_000_000
    this.#now = options.now ?? Date.now
    this.#timer = setInterval(() => { this.#sweep(false) }, options.sweepIntervalMs ?? 10_000)
    this.#timer.unref()
  }

  get size (): number {
    return this.#expiries.size
  }

  async epoch (): Promise<string> {
    return this.#epoch
  }

  async redeem (scope: string, jti: string, epoch: string | undefined, ttlMs: number): Promise<Redemption> {
    assertRedemption(scope, jti, ttlMs)
    if (epoch !== this.#epoch) return 'other_epoch'
    // Length-prefixed so no scope/jti pair can collide with another whatever characters they hold.
    const key = `${scope.length}:${scope}:${jti}`
    const now = this.#now()
    const expiresAt = this.#expiries.get(key)
    if (expiresAt !== undefined && expiresAt > now) return 'already_redeemed'
    if (this.#expiries.size >= this.#maxEntries) {
      this.#sweep(true)
      if (this.#expiries.size >= this.#maxEntries) throw new StoreFullError()
    }
    this.#expiries.delete(key)
    this.#expiries.set(key, now + ttlMs)
    return 'redeemed'
  }

  async close (): Promise<void> {
    clearInterval(this.#timer)
    this.#expiries.clear()
  }

  /** From the oldest entry, up to the first live one, or through every entry when `everything`. */
  #sweep (everything: boolean): void {
    const now = this.#now()
    for (const [key, expiresAt] of this.#expiries) {
      if (expiresAt <= now) this.#expiries.delete(key)
      else if (!everything) break
    }
  }
}
