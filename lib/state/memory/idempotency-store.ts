import {
  assertDurations, assertScope, type IdempotencyBegin, type IdempotencyStore, type StoredResponse
} from '../idempotency.js'

interface Entry {
  readonly fingerprint: string
  readonly expiresAtMs: number
  /** The attempt that holds the key, or whose answer `response` is. */
  readonly attempt: string
  /** Until when the claim blocks other attempts; irrelevant once `response` is set. */
  readonly lockedUntilMs: number
  /** The attempt may have sent: the key is never taken over. */
  readonly sending: boolean
  readonly response?: StoredResponse
}

export interface MemoryIdempotencyStoreOptions {
  /** How often expired entries are dropped; 60 s by default. */
  sweepIntervalMs?: number
}

/**
 * Single-process idempotency store (development, tests, single-node deployments). Atomic
 * because each operation runs to completion without awaiting. Expired entries are also ignored
 * on read, so the sweep only bounds memory and its timing never changes behaviour. Call
 * `close()` when done; the timer is unref'd so forgetting it does not keep the process alive.
 */
export class MemoryIdempotencyStore implements IdempotencyStore {
  readonly #entries = new Map<string, Entry>()
  readonly #sweeper: NodeJS.Timeout

  constructor (options: MemoryIdempotencyStoreOptions = {}) {
    const sweepIntervalMs = options.sweepIntervalMs ?? 60_000
    this.#sweeper = setInterval(() => { this.#sweep(Date.now()) }, sweepIntervalMs)
    this.#sweeper.unref()
  }

  /** Entries held, expired or not (for metrics, and to show the sweep bounds memory). */
  get size (): number {
    return this.#entries.size
  }

  async begin (scope: string, key: string, fingerprint: string, attempt: string, ttlMs: number, lockMs: number): Promise<IdempotencyBegin> {
    assertScope(scope)
    assertDurations(ttlMs, lockMs)
    const now = Date.now()
    const id = entryKey(scope, key)
    const entry = this.#live(id, now)
    if (entry !== undefined) {
      if (entry.fingerprint !== fingerprint) return { state: 'mismatch' }
      if (entry.response !== undefined) return { state: 'replay', response: copy(entry.response) }
      if (entry.lockedUntilMs > now) return { state: 'in_flight' }
      if (entry.sending) return { state: 'unknown' }
      // The claim lapsed before its owner could send: its owner died, this retry takes over.
    }
    this.#entries.set(id, { fingerprint, expiresAtMs: now + ttlMs, attempt, lockedUntilMs: now + lockMs, sending: false })
    return { state: 'started' }
  }

  async sending (scope: string, key: string, attempt: string): Promise<boolean> {
    assertScope(scope)
    const id = entryKey(scope, key)
    const entry = this.#live(id, Date.now())
    if (entry?.attempt !== attempt) return false
    this.#entries.set(id, { ...entry, sending: true })
    return true
  }

  async complete (scope: string, key: string, fingerprint: string, attempt: string, response: StoredResponse, ttlMs: number): Promise<void> {
    assertScope(scope)
    assertDurations(ttlMs)
    const now = Date.now()
    const id = entryKey(scope, key)
    const entry = this.#live(id, now)
    if (entry !== undefined && (entry.attempt !== attempt || entry.response !== undefined)) return
    // Copied so later mutation of the caller's object cannot alter what is replayed.
    this.#entries.set(id, { fingerprint, expiresAtMs: now + ttlMs, attempt, lockedUntilMs: 0, sending: false, response: copy(response) })
  }

  async abandon (scope: string, key: string, attempt: string): Promise<void> {
    assertScope(scope)
    const id = entryKey(scope, key)
    const entry = this.#live(id, Date.now())
    if (entry?.attempt === attempt && entry.response === undefined) this.#entries.delete(id)
  }

  /** Stops the sweep timer. */
  close (): void {
    clearInterval(this.#sweeper)
  }

  #live (id: string, now: number): Entry | undefined {
    const entry = this.#entries.get(id)
    if (entry === undefined || entry.expiresAtMs > now) return entry
    this.#entries.delete(id)
    return undefined
  }

  #sweep (now: number): void {
    for (const [id, entry] of this.#entries) {
      if (entry.expiresAtMs <= now) this.#entries.delete(id)
    }
  }
}

/** Length-prefixed so no scope/key pair can collide with another whatever characters they hold. */
function entryKey (scope: string, key: string): string {
  return `${scope.length}:${scope}${key}`
}

function copy (response: StoredResponse): StoredResponse {
  return { statusCode: response.statusCode, body: response.body, headers: { ...response.headers } }
}
