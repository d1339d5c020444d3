/** A response as first sent, replayed byte for byte to retries with the same key. */
export interface StoredResponse {
  readonly statusCode: number
  readonly body: string
  readonly headers: Record<string, string>
}

export type IdempotencyBegin =
  /** The caller owns the key: do the work, then `complete` (or `abandon`). */
  | { readonly state: 'started' }
  /** Another attempt with the same request holds the key (typically answered with 409). */
  | { readonly state: 'in_flight' }
  /** The request was already answered: send this instead of doing the work again. */
  | { readonly state: 'replay', readonly response: StoredResponse }
  /** The key was used with a different request (typically answered with 422). */
  | { readonly state: 'mismatch' }

/**
 * Stripe-like Idempotency-Key storage. A key, within a scope (tenant), is bound to the
 * fingerprint of the first request that used it for `ttlMs`: retries of that request get its
 * response, any other request with the key gets 'mismatch'.
 */
export interface IdempotencyStore {
  /**
   * Atomically claims the key: of any number of concurrent callers exactly one gets 'started'.
   * The claim is held for `lockMs` (at most `ttlMs`); after that, if neither completed nor
   * abandoned (the owner crashed), a retry of the same request may claim it again, so a dead
   * instance cannot block a key for the whole ttl.
   */
  begin(scope: string, key: string, fingerprint: string, ttlMs: number, lockMs: number): Promise<IdempotencyBegin>
  /**
   * Stores the response for replay for `ttlMs` and releases the claim. The first completion
   * wins, and nothing is stored if the key now belongs to a different request (our claim lapsed
   * and was taken by another fingerprint).
   */
  complete(scope: string, key: string, fingerprint: string, response: StoredResponse, ttlMs: number): Promise<void>
  /**
   * Releases an in-flight claim and forgets the key, for failures that must not be replayed
   * (e.g. 503: the retry should really try again). A completed response is never removed.
   */
  abandon(scope: string, key: string): Promise<void>
}

/** Shared argument checks, so both stores reject the same misuse the same way. */
export function assertDurations (ttlMs: number, lockMs?: number): void {
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new RangeError(`idempotency ttlMs must be a positive integer, got ${ttlMs}`)
  }
  if (lockMs === undefined) return
  if (!Number.isSafeInteger(lockMs) || lockMs <= 0 || lockMs > ttlMs) {
    throw new RangeError(`idempotency lockMs must be a positive integer no greater than ttlMs, got ${lockMs}`)
  }
}

/** Keys are built from the scope, so an empty one is a caller bug, not a tenant. */
export function assertScope (scope: string): void {
  if (scope === '') throw new RangeError('idempotency scope must not be empty')
}
