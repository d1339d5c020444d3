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
  | { kind: 'mismatch', counts: LimitCount[] }
  | { kind: 'verified', counts: LimitCount[] }

/**
 * Runs a request's whole admission as one atomic step: one script and one round trip on
 * Redis, shared by every instance; in process on the embedded default.
 */
export interface Admission {
  dispatch (plan: DispatchPlan): Promise<DispatchVerdict>
  verify (plan: VerifyPlan): Promise<VerifyVerdict>
}

/** The last `|` separates a token record's code hash from its recipient tag. */
export function splitRecord (record: string): { storedForm: string, recipientTag: string } {
  const separator = record.lastIndexOf('|')
  return { storedForm: record.slice(0, separator), recipientTag: record.slice(separator + 1) }
}
