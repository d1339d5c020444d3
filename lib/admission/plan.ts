import type { KeyMode } from '../keys/api-keys.js'
import type { TenantKey } from '../tenants/tenant.js'
import { scopeTag, tenantScope } from '../keys/scope.js'
import type { QuotaWindow } from '../limits/window.js'
import type { LockoutPolicy } from './lockout.js'
import type { RateLimit, VelocityLimits } from '../limits/rate-limit.js'

/*
 * A request's admission plan: which counters it counts against, under which keys, with which
 * limits, and what it writes if admitted. Pure functions of the request and the
 * configuration; the gate (gate.ts) runs a plan on memory or on Redis in one step.
 */

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
   * The share of the in-process counters the bucket lives in (memory-admission.ts): one per
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

/*
 * Lanes. Each tenant and mode counts a mailbox in two lanes: the backend lane, for codes a
 * secret key asked for (the partner's backend), and the browser lane, for codes a restricted
 * key asked for (anyone holding the page's public key). The lane is chosen at dispatch and
 * written into the code's record, so a wrong guess counts in the lane of the code it guessed,
 * whoever sends it. Each lane has its own lockout, recipient bucket and service-wide mailbox
 * bucket: a stranger, who holds only public keys and can only guess codes he asked for
 * himself (requestIds are secret), can lock or fill the browser lane and never the backend
 * lane, the owner's way in (see README, "Security model").
 *
 * The backend lane keeps the names the counters had before lanes (the bare recipient tag),
 * so existing locks and counts go on applying to it, and a record without a lane is read as
 * the backend lane's.
 */

/** The lane's name for a mailbox: what its lockout key and buckets end with, and what a record carries. */
export function laneSubject (lane: Audience, recipientTag: string): string {
  return lane === 'backend' ? recipientTag : `browser:${recipientTag}`
}

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

/** What the configuration sets; a tenant's `limits` override the per-tenant ones. */
export interface AdmissionPolicy {
  limits: VelocityLimits
  /** The service-wide cap per mailbox, across tenants; null when switched off. */
  mailbox: RateLimit | null
  lockout: LockoutPolicy
}

/** The policy of a configuration (lib/config/types.ts). */
export function admissionPolicy (config: { rateLimits: VelocityLimits, mailboxLimit: RateLimit | null, lockout: LockoutPolicy }): AdmissionPolicy {
  return { limits: config.rateLimits, mailbox: config.mailboxLimit, lockout: config.lockout }
}

/** Who asks: the key, and where the request comes from, as per-source buckets. */
export interface Requester {
  key: TenantKey
  /** The bucket of the client's address, or of the end user's a backend forwards. */
  sourceBucket: string
  /** When a backend forwards its end user: the backend's own address bucket; else null. */
  backendBucket: string | null
}

/** The namespace of velocity counters, as @fastify/rate-limit names them. */
const VELOCITY_PREFIX = 'rl:'

function tenantLimit (policy: AdmissionPolicy, key: TenantKey, name: 'source' | 'backend' | 'recipient' | 'key', bucket: string): LimitHit {
  const { max, windowMs } = key.tenant.limits[name] ?? policy.limits[name]
  const prefix = `${VELOCITY_PREFIX}${name[0] ?? ''}:${scopeTag(key.tenant.id, key.mode)}`
  return { name, bucket: `${prefix}:${bucket}`, max, windowMs, share: prefix }
}

/** The caller's own buckets, in the order they are counted: source, then a forwarding backend's. */
function ownLimits (policy: AdmissionPolicy, requester: Requester): LimitHit[] {
  const { key, sourceBucket, backendBucket } = requester
  const limits = [tenantLimit(policy, key, 'source', sourceBucket)]
  if (backendBucket !== null) limits.push(tenantLimit(policy, key, 'backend', `${key.id}:${backendBucket}`))
  return limits
}

/** Who reads a key's answers, which is also the lane its codes go in. */
export function audienceOf (key: TenantKey): Audience {
  return key.kind === 'restricted' ? 'browser' : 'backend'
}

/** Where a recipient's wrong guesses are counted, per tenant and mode; the lane subject follows. */
export function lockoutKeyPrefix (tenantId: string, mode: KeyMode): string {
  return `lockout:${scopeTag(tenantId, mode)}:`
}

/** Both lanes' lockout keys of a mailbox, which a tenant's unlock clears together. */
export function lockoutKeys (tenantId: string, mode: KeyMode, recipientTag: string): string[] {
  const prefix = lockoutKeyPrefix(tenantId, mode)
  return [prefix + laneSubject('backend', recipientTag), prefix + laneSubject('browser', recipientTag)]
}

/**
 * Where a mailbox's suppression lives, per tenant and mode (a permanent bounce or a complaint
 * suppresses it for every lane and spelling): the tenant's hash tag, so the dispatch script
 * reads it in its own slot.
 */
export function suppressionKey (tenantId: string, mode: KeyMode, recipientTag: string): string {
  return `suppressed:${scopeTag(tenantId, mode)}:${recipientTag}`
}

/**
 * The in-process share a lockout state belongs to: its tenant, mode and lane (the key up to
 * its last `:`, since neither tenant ids nor recipient tags hold one).
 */
export function lockoutShare (lockoutKey: string): string {
  return lockoutKey.slice(0, lockoutKey.lastIndexOf(':'))
}

/**
 * The service-wide bucket of a mailbox in a lane. Live and sandbox traffic are counted apart:
 * sandbox keys send no mail, and a public sandbox key must not use up a real person's
 * allowance. Each lane has its own, so that strangers filling the browser lane's cap through
 * several tenants' public keys cannot stop the partners' backends from reaching the owner.
 */
function mailboxLimit (policy: AdmissionPolicy, mode: KeyMode, subject: string): LimitHit | null {
  if (policy.mailbox === null) return null
  return { name: 'mailbox', bucket: `${VELOCITY_PREFIX}m:{mailbox:${mode}:${subject}}`, max: policy.mailbox.max, windowMs: policy.mailbox.windowMs, share: `${VELOCITY_PREFIX}m:${mode}` }
}

/** Every claim of a dispatch: the tenant's first, then the key's share if it has one. */
export function quotaClaims (quota: DispatchPlan['quota']): QuotaClaim[] {
  return quota.share === null ? [quota.tenant] : [quota.tenant, quota.share]
}

export interface DispatchRequest extends Requester {
  /** The keyed tag of the recipient's canonical mailbox. */
  recipientTag: string
  token: { key: string, record: string, ttlMs: number }
  nowMs: number
}

export function dispatchPlan (policy: AdmissionPolicy, request: DispatchRequest): DispatchPlan {
  const { key, recipientTag, token, nowMs } = request
  const { tenant, mode } = key
  const audience = audienceOf(key)
  const subject = laneSubject(audience, recipientTag)
  const allowance = tenant.tier[mode]
  const scope = tenantScope(tenant.id, mode)
  return {
    audience,
    ownLimits: ownLimits(policy, request),
    // The recipient's bucket before the key's: a dispatch refused for its recipient does not
    // use up the key's bucket for every other caller.
    sharedLimits: [tenantLimit(policy, key, 'recipient', subject), tenantLimit(policy, key, 'key', key.id)],
    mailbox: mailboxLimit(policy, mode, subject),
    lockoutKey: lockoutKeyPrefix(tenant.id, mode) + subject,
    suppressionKey: suppressionKey(tenant.id, mode, recipientTag),
    quota: {
      tenant: { scope, share: null, limit: allowance.limit, window: allowance.window },
      share: key.allowanceShare === null ? null : { scope, share: key.id, limit: Math.floor(allowance.limit * key.allowanceShare), window: allowance.window },
      nowMs,
      description: `${mode === 'live' ? 'live' : 'sandbox'} allowance of tier "${tenant.tier.name}" (${allowance.limit} per ${allowance.window.spec})`
    },
    token
  }
}

export interface VerifyRequest extends Requester {
  tokenKey: string
  storedForms: readonly string[]
}

export function verifyPlan (policy: AdmissionPolicy, request: VerifyRequest): VerifyPlan {
  const { key, tokenKey, storedForms } = request
  return {
    audience: audienceOf(key),
    ownLimits: ownLimits(policy, request),
    sharedLimits: [tenantLimit(policy, key, 'key', key.id)],
    tokenKey,
    storedForms,
    lockout: { keyPrefix: lockoutKeyPrefix(key.tenant.id, key.mode), policy: policy.lockout }
  }
}

export function refusalPlan (policy: AdmissionPolicy, requester: Requester): RefusalPlan {
  return { audience: audienceOf(requester.key), limits: ownLimits(policy, requester) }
}
