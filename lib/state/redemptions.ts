import { randomBytes } from 'node:crypto'

/** What a redemption did: the first of its receipt, a repeat, or refused for another epoch. */
export type Redemption = 'redeemed' | 'already_redeemed' | 'other_epoch'

/**
 * Which receipts were redeemed. A receipt redeems once in its lifetime: of any number of
 * redeems of one receipt, concurrent or not, across every instance sharing the store and
 * across their restarts, at most one succeeds. Entries only need to outlive the receipt (after
 * its expiry it is refused anyway). What a store cannot remember it refuses: every receipt is
 * issued in an epoch of its scope, and the epoch changes whenever the store may have lost
 * redemptions (a restart of the embedded default; Redis losing its data), so a receipt of an
 * earlier epoch never redeems, redeemed before or not. Both implementations pass
 * test/lib/state/redemption-store.test.ts.
 */
export interface RedemptionStore {
  /** The epoch receipts of `scope` (tenant and mode) are issued in now. */
  epoch (scope: string): Promise<string>
  /**
   * Marks the receipt `jti` of `scope`, issued in `epoch` (undefined: a receipt from before
   * epochs, which never redeems), redeemed for `ttlMs`: checked against the current epoch in
   * the same step as the mark.
   */
  redeem (scope: string, jti: string, epoch: string | undefined, ttlMs: number): Promise<Redemption>
  close (): Promise<void>
}

/** Shared argument checks, so both stores refuse the same misuse the same way. */
export function assertRedemption (scope: string, jti: string, ttlMs: number): void {
  if (scope === '' || jti === '') throw new RangeError('redemption scope and jti must not be empty')
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) throw new RangeError(`redemption ttlMs must be a positive integer, got ${ttlMs}`)
}

/** A new epoch: 128 random bits, base64url. */
export function newEpoch (): string {
  return randomBytes(16).toString('base64url')
}
