/** A response as first sent, replayed byte for byte to retries with the same key. */
export interface StoredResponse {
  readonly statusCode: number
  readonly body: string
  readonly headers: Record<string, string>
}

export type IdempotencyBegin =
  /** The caller owns the key: do the work (`sending` before anything leaves), then `complete` or `abandon`. */
  | { readonly state: 'started' }
  /** Another attempt with the same request holds the key (typically answered with 409). */
  | { readonly state: 'in_flight' }
  /**
   * An earlier attempt with the same request may have sent, and its answer was never recorded:
   * the key does not run again until `ttlMs` after that attempt's claim (a 409 of its own).
   */
  | { readonly state: 'unknown' }
  /** The request was already answered: send this instead of doing the work again. */
  | { readonly state: 'replay', readonly response: StoredResponse }
  /** The key was used with a different request (typically answered with 422). */
  | { readonly state: 'mismatch' }

/**
 * Stripe-like Idempotency-Key storage. A key, within a scope (tenant), is bound to the
 * fingerprint of the first request that used it for `ttlMs`: retries of that request get its
 * response, any other request with the key gets 'mismatch'. Each attempt names itself
 * (`attempt`, unique to it), so that an attempt acts only on its own claim: a late or repeated
 * call never releases or completes another attempt's.
 *
 * The key runs at most once in its window whatever fails: once an attempt has marked that it
 * may send (`sending`), no other attempt ever takes the key over; retries replay its answer
 * when it is recorded, and get 'unknown' while it is not.
 */
export interface IdempotencyStore {
  /**
   * Atomically claims the key for `attempt`: of any number of concurrent callers exactly one
   * gets 'started'. The claim is in flight for `lockMs` (at most `ttlMs`). After that, if the
   * attempt neither completed nor abandoned, a retry of the same request may take the key over
   * when the attempt had not marked `sending` (it died before anything left, so a dead instance
   * does not block a key for the whole ttl), and gets 'unknown' when it had.
   * A call that rejects (the store unavailable) leaves no claim of `attempt`'s behind, also when
   * the store made it and only the answer was lost.
   */
  begin(scope: string, key: string, fingerprint: string, attempt: string, ttlMs: number, lockMs: number): Promise<IdempotencyBegin>
  /**
   * Marks that `attempt` may send now: from then on its key never runs again within its window.
   * False, marking nothing, when the claim is no longer the attempt's (it lapsed and another
   * attempt took the key over, or the record is gone): the caller must not send.
   */
  sending(scope: string, key: string, attempt: string): Promise<boolean>
  /**
   * Stores the response for replay for `ttlMs` and releases the claim, unless the key now
   * belongs to another attempt or already has a response (the first completion wins). It may
   * land after the caller gave up on it, which only records the answer that was given.
   */
  complete(scope: string, key: string, fingerprint: string, attempt: string, response: StoredResponse, ttlMs: number): Promise<void>
  /**
   * Releases `attempt`'s claim and forgets the key, for an attempt that sent nothing (a
   * refusal, a 503, a delivery that failed: the retry should really try again). A completed
   * response, or another attempt's claim, is never removed.
   */
  abandon(scope: string, key: string, attempt: string): Promise<void>
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
