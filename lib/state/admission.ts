import type { DispatchPlan, LimitHit, RefusalPlan, VerifyPlan } from '../admission/plan.js'
import type { WindowCount } from '../admission/velocity.js'
import type { QuotaDecision } from './quota.js'

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
