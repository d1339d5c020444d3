/**
 * Which receipts were redeemed. A receipt redeems once: of any number of concurrent redeems
 * of one receipt, across every instance sharing the store, exactly one is first. Entries
 * only need to outlive the receipt (after its expiry it is refused anyway). Both
 * implementations pass test/lib/receipts/redemption-store.test.ts.
 */
export interface RedemptionStore {
  /**
   * Marks the receipt `jti` of `scope` (tenant and mode) redeemed for `ttlMs`; true for the
   * first redemption, false when it already was.
   */
  redeem (scope: string, jti: string, ttlMs: number): Promise<boolean>
  close (): Promise<void>
}

/** Shared argument checks, so both stores refuse the same misuse the same way. */
export function assertRedemption (scope: string, jti: string, ttlMs: number): void {
  if (scope === '' || jti === '') throw new RangeError('redemption scope and jti must not be empty')
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) throw new RangeError(`redemption ttlMs must be a positive integer, got ${ttlMs}`)
}

/** The store key: the scope is the Cluster hash tag, as for every per-tenant key. */
export function redemptionKey (scope: string, jti: string): string {
  return `receipt:{${scope}}:${jti}`
}
