import type { KeyMode } from '../tenants/api-keys.js'
import type { TenantKey } from '../tenants/registry.js'
import { scopeTag, tenantScope } from '../tenants/scope.js'
import type { QuotaWindow } from '../quota/window.js'
import type { LockoutPolicy } from './lockout.js'
import type { RateLimit, VelocityLimits } from './velocity.js'

/*
 * A request's admission plan: which counters it counts against, under which keys, with which
 * limits, and what it writes if admitted. Pure functions of the request and the
 * configuration; the gate (gate.ts) runs a plan on memory or on Redis in one step.
 */

/**
 * - `source`: the client, or the end user a backend forwards (End-User-IP), per address
 *   (IPv6 per prefix);
 * - `backend`: a backend that forwards its end users, per key and backend address;
 * - `recipient`: the recipient mailbox, per tenant;
 * - `key`: the API key;
 * - `mailbox`: the recipient mailbox across every tenant (the service-wide cap).
 */
export type LimitName = 'source' | 'backend' | 'recipient' | 'key' | 'mailbox'

/** One velocity counter a request counts against: at most `max` per `windowMs`. */
export interface LimitHit {
  name: LimitName
  bucket: string
  max: number
  windowMs: number
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
 * order, up to the first one exceeded: a source past its own limit no longer counts against
 * the buckets it shares with others (the key's, the recipient's). Then the recipient's
 * lockout, the service-wide mailbox cap (counted only for a dispatch that passed everything
 * else), the allowance (every claim, or none), and the new token.
 */
export interface DispatchPlan {
  audience: Audience
  limits: readonly LimitHit[]
  mailbox: LimitHit | null
  lockoutKey: string
  /** The tenant's allowance and, for a restricted key, its own share: a unit of both or of none. */
  quota: { tenant: QuotaClaim, share: QuotaClaim | null, nowMs: number, description: string }
  token: { key: string, record: string, ttlMs: number }
}

/**
 * A verify: the limits, then the token's consumption (whatever the guess), and, unless the
 * recipient is locked, the comparison and the recipient's run of failures (cleared by a right
 * guess, extended by a wrong one). `storedForms` is the record's hash part the guess would
 * have under each verifying key (empty for a malformed guess, which can match nothing).
 */
export interface VerifyPlan {
  audience: Audience
  limits: readonly LimitHit[]
  tokenKey: string
  storedForms: readonly string[]
  /** The recipient's state is `<prefix><recipient tag>`, the tag being read from the token. */
  lockout: { keyPrefix: string, policy: LockoutPolicy }
}

/** A request refused before admission (a bad address, say): it still counts as a request. */
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

/** The policy of a configuration (lib/config.ts). */
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
  return { name, bucket: `${VELOCITY_PREFIX}${name[0] ?? ''}:${scopeTag(key.tenant.id, key.mode)}:${bucket}`, max, windowMs }
}

/** The caller's own buckets, in the order they are counted: source, backend, key. */
function callerLimits (policy: AdmissionPolicy, requester: Requester): LimitHit[] {
  const { key, sourceBucket, backendBucket } = requester
  const limits = [tenantLimit(policy, key, 'source', sourceBucket)]
  if (backendBucket !== null) limits.push(tenantLimit(policy, key, 'backend', `${key.id}:${backendBucket}`))
  limits.push(tenantLimit(policy, key, 'key', key.id))
  return limits
}

function audienceOf (key: TenantKey): Audience {
  return key.kind === 'restricted' ? 'browser' : 'backend'
}

/** Where a recipient's wrong guesses are counted, per tenant and mode. */
export function lockoutKeyPrefix (tenantId: string, mode: KeyMode): string {
  return `lockout:${scopeTag(tenantId, mode)}:`
}

/**
 * The service-wide bucket of a mailbox. Live and sandbox traffic are counted apart: sandbox
 * keys send no mail, and a public sandbox key must not use up a real person's allowance.
 */
function mailboxLimit (policy: AdmissionPolicy, mode: KeyMode, recipientTag: string): LimitHit | null {
  if (policy.mailbox === null) return null
  return { name: 'mailbox', bucket: `${VELOCITY_PREFIX}m:{mailbox:${mode}:${recipientTag}}`, max: policy.mailbox.max, windowMs: policy.mailbox.windowMs }
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
  const [source, ...rest] = callerLimits(policy, request)
  const allowance = tenant.tier[mode]
  const scope = tenantScope(tenant.id, mode)
  return {
    audience: audienceOf(key),
    // The recipient's bucket right after the caller's own source: a source past its limit
    // can no longer fill a recipient's bucket for everyone else.
    limits: [...(source === undefined ? [] : [source]), tenantLimit(policy, key, 'recipient', recipientTag), ...rest],
    mailbox: mailboxLimit(policy, mode, recipientTag),
    lockoutKey: lockoutKeyPrefix(tenant.id, mode) + recipientTag,
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
    limits: callerLimits(policy, request),
    tokenKey,
    storedForms,
    lockout: { keyPrefix: lockoutKeyPrefix(key.tenant.id, key.mode), policy: policy.lockout }
  }
}

export function refusalPlan (policy: AdmissionPolicy, requester: Requester): RefusalPlan {
  return { audience: audienceOf(requester.key), limits: callerLimits(policy, requester) }
}
