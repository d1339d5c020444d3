import type { LockoutPolicy } from '../limits/lockout-policy.js'
import type { QuotaWindow } from '../limits/window.js'
import type { QuotaDecision } from './quota.js'

/**
 * - `source`: the client, or the end user a backend forwards (End-User-IP), per address
 *   (IPv6 per prefix);
 * - `backend`: a backend that forwards its end users, per key and backend address;
 * - `recipient`: the recipient mailbox, per tenant and lane;
 * - `key`: the API key;
 * - `mailbox`: the recipient mailbox across every tenant, per lane (the service-wide cap).
 */
export type LimitName = 'source' | 'backend' | 'recipient' | 'key' | 'mailbox'

/** One velocity counter a request counts against: at most `max` per `windowMs`. */
export interface LimitHit {
  name: LimitName
  bucket: string
  max: number
  windowMs: number
  /**
   * The share of the in-process counters the bucket lives in (lib/state/memory/admission.ts): one per
   * kind of limit and tenant scope, the service-wide mailbox cap one per mode. New buckets
   * only ever displace old ones of their own share, so a flood through one tenant never
   * resets another's counters. Redis keeps every bucket and ignores it.
   */
  share: string
}

/** One allowance counter a dispatch takes a unit of: the tenant's, or a restricted key's share. */
export interface QuotaClaim {
  /** The tenant's scope (`acme:live`), which is also the counter's hash tag. */
  scope: string
  /** The key whose share this is; null for the tenant's whole allowance. */
  share: string | null
  limit: number
  window: QuotaWindow
}

/**
 * Who reads the answer. A restricted key lives in a web page: what its answers carry is
 * readable by any script there, so they tell nothing about other callers' buckets or the
 * tenant's billing.
 */
export type Audience = 'backend' | 'browser'

/**
 * Everything a dispatch must pass and write, decided together. The limits are counted in
 * order, up to the first one exceeded: the caller's own (`ownLimits`: its source, and a
 * forwarding backend's address), then the lane's lockout, then the buckets it shares with
 * other callers (`sharedLimits`: the recipient's in its lane, the key's). So a source past its
 * own limit, or a dispatch to a locked mailbox, no longer counts against what other callers
 * need. Then the service-wide mailbox cap (counted only for a dispatch that passed everything
 * else), the allowance (every claim, or none), and the new token.
 */
export interface DispatchPlan {
  audience: Audience
  ownLimits: readonly LimitHit[]
  sharedLimits: readonly LimitHit[]
  mailbox: LimitHit | null
  /** The mailbox's lockout state in the lane of the dispatching key. */
  lockoutKey: string
  /** The mailbox's suppression in the tenant and mode (both lanes): set, the dispatch sends nothing. */
  suppressionKey: string
  /** The tenant's allowance and, for a restricted key, its own share: a unit of both or of none. */
  quota: { tenant: QuotaClaim, share: QuotaClaim | null, nowMs: number, description: string }
  token: { key: string, record: string, ttlMs: number }
}

/**
 * A verify: the caller's own limits; then, only if the requestId has a live code, the shared
 * limits (the key's), the token's consumption (whatever the guess) and, unless the code's
 * lane is locked, the comparison and the lane's run of failures (cleared by a right guess,
 * extended by a wrong one). A verify of an unknown requestId costs the service nothing, so
 * it counts only against the caller's own buckets: junk from any number of sources cannot
 * fill the key's bucket. `storedForms` is the record's hash part the guess would have under
 * each verifying key (empty for a malformed guess, which can match nothing).
 */
export interface VerifyPlan {
  audience: Audience
  ownLimits: readonly LimitHit[]
  sharedLimits: readonly LimitHit[]
  tokenKey: string
  storedForms: readonly string[]
  /** The lane's state is `<prefix><lane subject>`, the subject being read from the token. */
  lockout: { keyPrefix: string, policy: LockoutPolicy }
}

/**
 * A request refused before admission (a bad address, say): it still counts as a request,
 * against the caller's own buckets only, never against the key's that every caller shares.
 */
export interface RefusalPlan {
  audience: Audience
  limits: readonly LimitHit[]
}

/** A counter after one hit: the count in its window and the milliseconds left in it. */
export interface WindowCount {
  current: number
  ttlMs: number
}

/** The first limit a request went past, and its count. */
export interface Exceeded {
  limit: LimitHit
  count: WindowCount
}

/**
 * What a store reports for a dispatch, counted and written atomically. `counts` follow the
 * plan's own limits, then its shared limits, up to the first one exceeded (the rest were not
 * counted).
 */
export type DispatchCounts =
  /** The requestId is taken (a 128-bit coincidence): nothing was counted; mint another. */
  | { kind: 'collision' }
  | { kind: 'locked', counts: WindowCount[], lockedForMs: number }
  /** The mailbox is suppressed (bounced or complained): nothing written, nothing charged. */
  | { kind: 'suppressed', counts: WindowCount[] }
  | { kind: 'limited', counts: WindowCount[], exceeded: Exceeded }
  | { kind: 'quota_exceeded', counts: WindowCount[], quota: QuotaDecision }
  | { kind: 'issued', counts: WindowCount[], quota: QuotaDecision }

/** What a store reports for a verify; `counts` as for a dispatch. */
export type VerifyCounts =
  | { kind: 'limited', counts: WindowCount[], exceeded: Exceeded }
  /** No such token (never issued, expired, used, another tenant's): only the caller's own limits were counted. */
  | { kind: 'missing', counts: WindowCount[] }
  /** The token was consumed while its recipient is locked: not compared, not counted. */
  | { kind: 'locked', counts: WindowCount[] }
  /** A wrong guess; `lockStartedMs` is the lock it started (0: none). */
  | { kind: 'mismatch', counts: WindowCount[], lockStartedMs: number, addressHash: string | null }
  | { kind: 'verified', counts: WindowCount[], addressHash: string | null }

/** Runs a plan atomically: one script on Redis, shared by every instance; in process otherwise. */
export interface AdmissionStore {
  dispatch (plan: DispatchPlan): Promise<DispatchCounts>
  verify (plan: VerifyPlan): Promise<VerifyCounts>
  /** Counts a refused request against the caller's limits, up to the first one exceeded. */
  count (plan: RefusalPlan): Promise<{ counts: WindowCount[], exceeded: Exceeded | null }>
  /** Ends the locks of these lockout keys and forgets their runs of failures; true when there was one. */
  clearLockout (keys: readonly string[]): Promise<boolean>
  /** Suppresses a mailbox (its suppression key) for `ttlMs`; a later suppression extends it. */
  suppress (key: string, ttlMs: number): Promise<void>
  /** Lifts a suppression; true when there was one. */
  unsuppress (key: string): Promise<boolean>
}
