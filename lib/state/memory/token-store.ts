import { StoreFullError } from '../../store-errors.js'
import { tenantScope } from '../../keys/scope.js'
import type { TokenRef, TokenStore } from '../tokens.js'

export interface MemoryTokenStoreOptions {
  /** Cap on live codes per tenant scope (tenant and mode). */
  maxTokensPerScope: number
  sweepIntervalMs?: number
  now?: () => number
}

// A sweep tick stops after this many live entries of each scope, so one tick never blocks
// the event loop for long however many tokens are stored.
const SWEEP_LIVE_BUDGET = 64
/** A full scope is scanned whole for expired tokens at most this often. */
const FULL_SCOPE_SWEEP_MS = 1000

interface Scope {
  entries: Map<string, string>
  nextFullSweepMs: number
}

/**
 * Tokens in one process, capped per tenant scope: a tenant that reaches its cap gets 503 for
 * its own dispatches while every other tenant goes on (a single cap for all would let one
 * tenant's flood refuse everyone's codes). Each scope maps requestIds to a single string
 * `expiresAt|record` (one object per token keeps the heap small at a million tokens). A
 * scope's map order is insertion order, and within a tenant insertion order is expiry order
 * (one lifetime per tenant), so the sweep walks each scope from its oldest entry.
 */
export class MemoryTokenStore implements TokenStore {
  readonly #scopes = new Map<string, Scope>()
  readonly #maxTokensPerScope: number
  readonly #now: () => number
  readonly #timer: NodeJS.Timeout
  #closed = false

  constructor (options: MemoryTokenStoreOptions) {
    this.#maxTokensPerScope = options.maxTokensPerScope
    this.#now = options.now ?? Date.now
    this.#timer = setInterval(() => { this.sweep(SWEEP_LIVE_BUDGET) }, options.sweepIntervalMs ?? 1000)
    this.#timer.unref()
  }

  get size (): number {
    let size = 0
    for (const scope of this.#scopes.values()) size += scope.entries.size
    return size
  }

  /**
   * Stores the record unless a live token has its requestId: false on a collision.
   * StoreFullError when its scope is at its cap. Admission writes the token this way
   * (lib/state/memory/admission.ts).
   */
  async put (token: TokenRef, record: string, ttlMs: number): Promise<boolean> {
    const now = this.#now()
    const scope = this.#scope(token)
    const { requestId } = token
    const existing = scope.entries.get(requestId)
    if (existing !== undefined && expiresAt(existing) > now) return false
    if (existing === undefined && scope.entries.size >= this.#maxTokensPerScope) {
      // Scanned at most once a second: a tenant at its cap must not cost every request a full scan.
      if (now >= scope.nextFullSweepMs) {
        scope.nextFullSweepMs = now + FULL_SCOPE_SWEEP_MS
        sweepScope(scope, now, Number.POSITIVE_INFINITY)
      }
      if (scope.entries.size >= this.#maxTokensPerScope) throw new StoreFullError()
    }
    // Re-inserting moves the token to the end, keeping the map in expiry order for the sweep.
    scope.entries.delete(requestId)
    scope.entries.set(flat(requestId), flat(`${now + ttlMs}|${record}`))
    return true
  }

  /** The record of a live token, left in place (admission counts the key's bucket only for live codes). */
  peek (token: TokenRef): string | null {
    const entry = this.#scopes.get(scopeOf(token))?.entries.get(token.requestId)
    if (entry === undefined) return null
    const separator = entry.indexOf('|')
    return Number(entry.slice(0, separator)) > this.#now() ? entry.slice(separator + 1) : null
  }

  async delete (token: TokenRef): Promise<void> {
    this.discard(token)
  }

  /** Removes the token at once (admission consumes a peeked code in the same synchronous step). */
  discard (token: TokenRef): void {
    this.#scopes.get(scopeOf(token))?.entries.delete(token.requestId)
  }

  /** Drops expired entries from each scope's oldest on, until `liveBudget` live ones of it were passed. */
  sweep (liveBudget: number): number {
    const now = this.#now()
    let removed = 0
    for (const scope of this.#scopes.values()) removed += sweepScope(scope, now, liveBudget)
    return removed
  }

  /** Always, until closed: a tenant at its cap is refused on its own, and takes nobody out of rotation. */
  async ready (): Promise<boolean> {
    return !this.#closed
  }

  async close (): Promise<void> {
    this.#closed = true
    clearInterval(this.#timer)
    this.#scopes.clear()
  }

  #scope (token: TokenRef): Scope {
    const name = scopeOf(token)
    let scope = this.#scopes.get(name)
    if (scope === undefined) {
      scope = { entries: new Map(), nextFullSweepMs: 0 }
      this.#scopes.set(flat(name), scope)
    }
    return scope
  }
}

function scopeOf ({ tenantId, mode }: TokenRef): string {
  return tenantScope(tenantId, mode)
}

function sweepScope ({ entries }: Scope, now: number, liveBudget: number): number {
  let removed = 0
  let live = 0
  for (const [key, entry] of entries) {
    if (expiresAt(entry) <= now) {
      entries.delete(key)
      removed++
    } else if (++live >= liveBudget) {
      break
    }
  }
  return removed
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
