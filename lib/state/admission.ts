import type { LockoutPolicy } from '../limits/lockout-policy.js'
import type { QuotaWindow } from '../limits/window.js'
import type { QuotaDecision } from './quota.js'
import type { TokenRef } from './tokens.js'
import type { KeyMode } from '../keys/api-keys.js'

/**
 * - `source`: the client, or the end user a backend forwards (End-User-IP), per address
 *   (IPv6 per prefix);
 * - `backend`: a backend that forwards its end users, per key and backend address;
 * - `recipient`: the recipient mailbox, per tenant and lane;
 * - `key`: the API key;
 * - `mailbox`: the recipient mailbox across every tenant, per lane (the service-wide cap).
 */
export type LimitName = 'source' | 'backend' | 'recipient' | 'key' | 'mailbox'

/** The limits counted per tenant and mode. */
export type TenantLimitName = Exclude<LimitName, 'mailbox'>

interface Counter {
  /** Live and sandbox traffic never share a counter. */
  mode: KeyMode
  /** What the counter counts: an address bucket, a key id (and a backend's address), a lane subject. */
  bucket: string
  max: number
  windowMs: number
}

/**
 * One velocity counter a request counts against: at most `max` per `windowMs`. Each adapter
 * names the counter from these identifiers (the Redis keys in lib/state/redis/keys.ts); the
 * in-process one keeps a share per limit, tenant and mode (the mailbox cap one per mode), so
 * that new buckets only ever displace old ones of their own share, and a flood through one
 * tenant never resets another's counters.
 */
export type LimitHit =
  | Counter & { name: TenantLimitName, tenantId: string }
  /** The service-wide cap of a mailbox (its lane subject is the bucket), across tenants. */
  | Counter & { name: 'mailbox' }

/**
 * The service-wide cap of a mailbox in a lane, and the reserve each tenant keeps inside it. The
 * cap alone let a few tenants (an attacker may hold several accounts) fill it and leave every
 * other tenant's backend no way to reach the owner. So each tenant's own codes to the mailbox in
 * the lane are counted too, over the cap's window (its *mailbox count*: the codes it was admitted,
 * less those given back after a failed delivery); while that count is below `reserve`, the cap
 * does not refuse the tenant (its own limits still do). Its dispatches count against the cap all
 * the same, so what one mailbox receives per lane and window is bounded by `max` plus `reserve`
 * per tenant that sends it codes.
 */
export type MailboxCap = Extract<LimitHit, { name: 'mailbox' }> & { reserve: number }

/** One allowance counter a dispatch takes a unit of: the tenant's, or a restricted key's share. */
export interface QuotaClaim {
  /** The tenant's scope (`acme:live`, lib/keys/scope.ts), as the quota port counts it. */
  scope: string
  /** The key whose share this is; null for the tenant's whole allowance. */
  share: string | null
  limit: number
  window: QuotaWindow
}

/**
 * The lane a request is in, which is also who reads its answer: `backend`, a partner's server
 * with a secret key; `browser`, a web page with a restricted key. What a page's answers carry is
 * readable by any script there, so they tell nothing about other callers' buckets or the
 * tenant's billing; and each lane counts a mailbox apart (lib/admission/plan.ts).
 */
export type Lane = 'backend' | 'browser'

/** A recipient mailbox of a tenant in one mode, by the keyed tag of its canonical address. */
export interface Mailbox {
  tenantId: string
  mode: KeyMode
  recipientTag: string
}

/**
 * A mailbox's lockout states in some of its lanes, by their lane subjects (the tag as a lane
 * counts it: lib/admission/plan.ts, "Lanes").
 */
export interface MailboxLanes {
  tenantId: string
  mode: KeyMode
  laneSubjects: readonly string[]
}

/**
 * Everything a dispatch must pass and write, decided together. The limits are counted in
 * order, up to the first one exceeded: the caller's own (`ownLimits`: its source, and a
 * forwarding backend's address), then the lane's lockout, then the buckets it shares with
 * other callers (`sharedLimits`: the recipient's in its lane, the key's). So a source past its
 * own limit, or a dispatch to a locked mailbox, no longer counts against what other callers
 * need. Then the service-wide mailbox cap (counted only for a dispatch that passed everything
 * else; a tenant below its reserve passes it whatever its count), the allowance (every claim, or
 * none), and the new token with a unit of the tenant's mailbox count.
 */
export interface DispatchPlan {
  lane: Lane
  /** The mailbox, in the tenant and mode: its suppression there (both lanes) means nothing is sent. */
  recipient: Mailbox
  /**
   * What a suppressed mailbox does to the dispatch. `refuse`: it stops right after the
   * lockout check, with nothing shared counted, nothing charged, no token. `withhold`: it is
   * counted, charged and written like any admitted dispatch and reported `withheld`, so that
   * its caller can take it back exactly as after a failed send and its answer, and every later
   * answer, is the one a failed delivery gives.
   */
  suppression: 'refuse' | 'withhold'
  /** The mailbox as the lane of the dispatching key counts it: its lockout state. */
  laneSubject: string
  ownLimits: readonly LimitHit[]
  sharedLimits: readonly LimitHit[]
  /** The cap and the reserve, in the lane of `laneSubject`; null when the cap is off. */
  mailbox: MailboxCap | null
  /** The tenant's allowance and, for a restricted key, its own share: a unit of both or of none. */
  quota: { tenant: QuotaClaim, share: QuotaClaim | null, nowMs: number, description: string }
  /** The new code's token, in the recipient's tenant and mode. */
  token: { requestId: string, record: string, ttlMs: number }
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
  lane: Lane
  ownLimits: readonly LimitHit[]
  sharedLimits: readonly LimitHit[]
  /** The code's token; the lane whose lockout counts the guess is the one its record carries. */
  token: TokenRef
  storedForms: readonly string[]
  lockout: LockoutPolicy
}

/**
 * A request refused before admission (a bad address, say): it still counts as a request,
 * against the caller's own buckets only, never against the key's that every caller shares.
 */
export interface RefusalPlan {
  lane: Lane
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
  /** The mailbox is suppressed (bounced or complained) and the plan refuses: nothing written, nothing charged. */
  | { kind: 'suppressed', counts: WindowCount[] }
  /**
   * The mailbox is suppressed and the plan withholds: everything an issued code counts,
   * reserves and writes was, and the caller takes the token and the units back.
   */
  | { kind: 'withheld', counts: WindowCount[], quota: QuotaDecision }
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
  /** Ends the locks of these lanes of a mailbox and forgets their runs of failures; true when there was one. */
  clearLockout (lanes: MailboxLanes): Promise<boolean>
  /** Suppresses a mailbox in its tenant and mode for `ttlMs`; a later suppression extends it. True when it was not suppressed already. */
  suppress (mailbox: Mailbox, ttlMs: number): Promise<boolean>
  /** Lifts a suppression; true when there was one. */
  unsuppress (mailbox: Mailbox): Promise<boolean>
  /**
   * Gives back the unit an admitted dispatch added to its tenant's mailbox count (MailboxCap),
   * once its mail did not leave: never below zero, nothing once the count's window is over.
   * The admission's own undo (a lost reply, too few replicas, a Cluster's cap) gives it back with
   * the token and the quota units.
   */
  refundMailboxCount (plan: DispatchPlan): Promise<void>
}

/** Every claim of a dispatch: the tenant's first, then the key's share if it has one. */
export function quotaClaims (quota: DispatchPlan['quota']): QuotaClaim[] {
  return quota.share === null ? [quota.tenant] : [quota.tenant, quota.share]
}
