import type { KeyMode } from '../tenants/api-keys.js'
import type { TenantKey } from '../tenants/registry.js'
import { scopeTag, tenantScope } from '../tenants/scope.js'
import type { QuotaWindow } from '../quota/window.js'
import type { VelocityLimits } from './velocity.js'

/*
 * A request's admission plan: which counters it counts against, under which keys, with which
 * limits, and what it writes if admitted. Pure functions of the request and the
 * configuration; the gate (gate.ts) runs a plan on memory or on Redis in one step.
 */

export type LimitName = keyof VelocityLimits

/** One velocity counter a request counts against: at most `max` per `windowMs`. */
export interface LimitHit {
  name: LimitName
  bucket: string
  max: number
  windowMs: number
}

/** The unit of allowance a dispatch takes: the tenant's scope, its limit and window. */
export interface QuotaClaim {
  scope: string
  limit: number
  window: QuotaWindow
  nowMs: number
  /** Names the allowance in a 402's message: `live allowance of tier "standard" (1000 per 1d)`. */
  description: string
}

/**
 * Everything a dispatch must pass and write, decided together: the recipient's lockout, the
 * velocity limits, the tenant's allowance, then the new token. Nothing is written for a
 * refused dispatch beyond its velocity hits (a refused request still counts as a request).
 */
export interface DispatchPlan {
  limits: readonly LimitHit[]
  lockout: { key: string, threshold: number }
  quota: QuotaClaim
  token: { key: string, record: string, ttlMs: number }
}

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

/** The limits and lockout the configuration sets; a tenant's `limits` override the limits. */
export interface AdmissionPolicy {
  limits: VelocityLimits
  lockout: { threshold: number, windowMs: number }
}

/** The namespace of velocity counters, as @fastify/rate-limit names them. */
const VELOCITY_PREFIX = 'rl:'

function limit (policy: AdmissionPolicy, key: TenantKey, name: LimitName, bucket: string): LimitHit {
  const { max, windowMs } = key.tenant.limits[name] ?? policy.limits[name]
  return { name, bucket: `${VELOCITY_PREFIX}${name[0] ?? ''}:${scopeTag(key.tenant.id, key.mode)}:${bucket}`, max, windowMs }
}

function sourceAndKeyLimits (policy: AdmissionPolicy, key: TenantKey, sourceBucket: string): LimitHit[] {
  return [limit(policy, key, 'source', sourceBucket), limit(policy, key, 'key', key.id)]
}

/** Where a recipient's wrong guesses are counted, per tenant and mode. */
export function lockoutKeyPrefix (tenantId: string, mode: KeyMode): string {
  return `lockout:${scopeTag(tenantId, mode)}:`
}

export interface DispatchRequest {
  key: TenantKey
  /** The per-source bucket of the caller's address (IPv6 by prefix). */
  sourceBucket: string
  /** The keyed tag of the recipient's canonical mailbox. */
  recipientTag: string
  token: { key: string, record: string, ttlMs: number }
  nowMs: number
}

export function dispatchPlan (policy: AdmissionPolicy, request: DispatchRequest): DispatchPlan {
  const { key, sourceBucket, recipientTag, token, nowMs } = request
  const { tenant, mode } = key
  const allowance = tenant.tier[mode]
  return {
    limits: [limit(policy, key, 'recipient', recipientTag), ...sourceAndKeyLimits(policy, key, sourceBucket)],
    lockout: { key: lockoutKeyPrefix(tenant.id, mode) + recipientTag, threshold: policy.lockout.threshold },
    quota: {
      scope: tenantScope(tenant.id, mode),
      limit: allowance.limit,
      window: allowance.window,
      nowMs,
      description: `${mode === 'live' ? 'live' : 'sandbox'} allowance of tier "${tenant.tier.name}" (${allowance.limit} per ${allowance.window.spec})`
    },
    token
  }
}

export interface VerifyRequest {
  key: TenantKey
  sourceBucket: string
  tokenKey: string
  storedForms: readonly string[]
}

export function verifyPlan (policy: AdmissionPolicy, request: VerifyRequest): VerifyPlan {
  const { key, sourceBucket, tokenKey, storedForms } = request
  return {
    limits: sourceAndKeyLimits(policy, key, sourceBucket),
    tokenKey,
    storedForms,
    lockout: { keyPrefix: lockoutKeyPrefix(key.tenant.id, key.mode), windowMs: policy.lockout.windowMs }
  }
}
