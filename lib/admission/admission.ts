import type { QuotaDecision } from '../quota/quota-store.js'
import type { QuotaWindow } from '../quota/window.js'

/** One velocity counter a request counts against: at most `max` per `windowMs`. */
export interface LimitHit {
  /** What is limited, for the 429's message: recipient, source, key. */
  name: string
  bucket: string
  max: number
  windowMs: number
}

/** A counter after the request's hit: the count in its window and the milliseconds left. */
export interface LimitCount {
  current: number
  ttlMs: number
}

/**
 * Everything a dispatch must pass and write, decided together: the recipient's lockout, the
 * velocity limits, the tenant's allowance, then the new token. Nothing is written for a
 * refused dispatch beyond its velocity hits (a refused request still counts as a request).
 */
export interface DispatchPlan {
  limits: readonly LimitHit[]
  lockout: { key: string, threshold: number }
  quota: { scope: string, limit: number, window: QuotaWindow, nowMs: number }
  token: { key: string, record: string, ttlMs: number }
}

export type DispatchVerdict =
  /** The requestId is taken (a 128-bit coincidence): nothing was counted; mint another. */
  | { kind: 'collision' }
  | { kind: 'locked', counts: LimitCount[], lockoutResetMs: number }
  | { kind: 'limited', counts: LimitCount[] }
  | { kind: 'quota_exceeded', counts: LimitCount[], quota: QuotaDecision }
  | { kind: 'issued', counts: LimitCount[], quota: QuotaDecision }

/**
 * A verify: the velocity limits, then the token's consumption (whatever the guess), the
 * comparison, and the recipient's lockout counter (cleared by a right guess, raised by a wrong
 * one). `storedForms` is the record's hash part the guess would have under each verifying key
 * (empty for a malformed guess, which can match nothing).
 */
export interface VerifyPlan {
  limits: readonly LimitHit[]
  tokenKey: string
  storedForms: readonly string[]
  /** The recipient's counter is `<prefix><recipient tag>`, the tag being read from the token. */
  lockout: { keyPrefix: string, windowMs: number }
}

export type VerifyVerdict =
  | { kind: 'limited', counts: LimitCount[] }
  /** No such token (never issued, expired, used, another tenant's): nothing else changed. */
  | { kind: 'missing', counts: LimitCount[] }
  /**
   * `failures`: the recipient's wrong guesses in the lockout window, this one included, and
   * `lockoutResetMs` the milliseconds until that window ends. `addressHash`: the record's, null
   * for a record written without one.
   */
  | { kind: 'mismatch', counts: LimitCount[], addressHash: string | null, failures: number, lockoutResetMs: number }
  | { kind: 'verified', counts: LimitCount[], addressHash: string | null }

/**
 * Runs a request's whole admission as one atomic step: one script and one round trip on
 * Redis, shared by every instance; in process on the embedded default.
 */
export interface Admission {
  dispatch (plan: DispatchPlan): Promise<DispatchVerdict>
  verify (plan: VerifyPlan): Promise<VerifyVerdict>
}

/**
 * A token record is `storedForm|recipientTag|addressHash` (none of the three contains `|`);
 * a record without the address hash (`storedForm|recipientTag`) reads with a null one.
 */
export function splitRecord (record: string): { storedForm: string, recipientTag: string, addressHash: string | null } {
  const first = record.indexOf('|')
  const second = record.indexOf('|', first + 1)
  return second === -1
    ? { storedForm: record.slice(0, first), recipientTag: record.slice(first + 1), addressHash: null }
    : { storedForm: record.slice(0, first), recipientTag: record.slice(first + 1, second), addressHash: record.slice(second + 1) }
}
