import type { QuotaWindow } from '../limits/window.js'

/** The outcome of one reservation: a dispatch's unit of allowance (lib/state/admission.ts). */
export interface QuotaDecision {
  /** Whether a unit was taken; when false nothing was counted. */
  readonly allowed: boolean
  /** Units taken in this window, including this one when allowed. */
  readonly used: number
  /** Units still available under the limit given to this call (never negative). */
  readonly remaining: number
  /** When the window ends and the allowance returns, epoch milliseconds. */
  readonly resetMs: number
  /** The window the unit was taken from: what `refund` needs to give it back. */
  readonly windowId: string
}

/**
 * A read of the current window's count. There is no limit here on purpose: the store only
 * counts, the limit belongs to the caller's configuration and comes with each dispatch's claim.
 */
export interface QuotaUsage {
  readonly used: number
  readonly resetMs: number
  readonly windowId: string
}

/**
 * Counts units (sent emails) per scope (an opaque tenant+mode string such as `acme:live`) in
 * fixed windows; a `share` (a restricted key's id) names a separate counter within the scope.
 * Units are taken by an admitted dispatch (lib/state/admission.ts), atomically with its other
 * counters: under any concurrency, across any number of instances sharing the store, exactly
 * `limit` reservations succeed in one window. The limit comes with each dispatch, so a config
 * reload applies at once while the window's count is kept. What is left here is what happens
 * after admission.
 */
export interface QuotaStore {
  /**
   * Gives one unit back to the window named by `windowId` (from a decision), e.g. when the email
   * could not be handed to the provider. Never goes below zero; a no-op once the window is gone.
   */
  refund(scope: string, windowId: string, share?: string | null): Promise<void>
  /** The count of the window containing `nowMs`, without changing it. */
  usage(scope: string, window: QuotaWindow, nowMs: number, share?: string | null): Promise<QuotaUsage>
}

/** Rejects limits that would make the comparison meaningless (NaN, fractions, negatives). */
export function assertLimit (limit: number): void {
  if (!Number.isSafeInteger(limit) || limit < 0) {
    throw new RangeError(`quota limit must be a non-negative integer, got ${limit}`)
  }
}

/** Both stores build keys from the scope, so an empty one is a caller bug, not a tenant. */
export function assertScope (scope: string): void {
  if (scope === '') throw new RangeError('quota scope must not be empty')
}
