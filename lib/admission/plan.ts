import { isSandbox, type KeyMode } from '../keys/api-keys.js'
import type { TenantKey } from '../tenants/tenant.js'
import { tenantScope } from '../keys/scope.js'
import type { LockoutPolicy } from '../limits/lockout-policy.js'
import type { Lane, DispatchPlan, LimitHit, MailboxLanes, RefusalPlan, TenantLimitName, VerifyPlan } from '../state/admission.js'
import type { RateLimit, VelocityLimits } from '../limits/rate-limit.js'

/*
 * A request's admission plan: which counters it counts against, named by what they count,
 * with which limits, and what it writes if admitted. Pure functions of the request and the
 * configuration; the gate (gate.ts) runs a plan on memory or on Redis in one step, and each
 * adapter names the counters its own way.
 */

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

/** The lane's name for a mailbox: what its lockout state and buckets are named by, and what a record carries. */
export function laneSubject (lane: Lane, recipientTag: string): string {
  return lane === 'backend' ? recipientTag : `browser:${recipientTag}`
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

function tenantLimit (policy: AdmissionPolicy, key: TenantKey, name: TenantLimitName, bucket: string): LimitHit {
  const { max, windowMs } = key.tenant.limits[name] ?? policy.limits[name]
  return { name, tenantId: key.tenant.id, mode: key.mode, bucket, max, windowMs }
}

/** The caller's own buckets, in the order they are counted: source, then a forwarding backend's. */
function ownLimits (policy: AdmissionPolicy, requester: Requester): LimitHit[] {
  const { key, sourceBucket, backendBucket } = requester
  const limits = [tenantLimit(policy, key, 'source', sourceBucket)]
  if (backendBucket !== null) limits.push(tenantLimit(policy, key, 'backend', `${key.id}:${backendBucket}`))
  return limits
}

/** The lane of a key's requests: who reads its answers, and where its codes are counted. */
export function laneOf (key: TenantKey): Lane {
  return key.kind === 'restricted' ? 'browser' : 'backend'
}

/** Both lanes of a mailbox, which a tenant's unlock clears together. */
export function bothLanes (tenantId: string, mode: KeyMode, recipientTag: string): MailboxLanes {
  return { tenantId, mode, laneSubjects: [laneSubject('backend', recipientTag), laneSubject('browser', recipientTag)] }
}

/**
 * Codes a tenant may send a mailbox per lane within the cap's window whatever the cap's count
 * (MailboxCap): enough for a user to ask again once after a lost mail, few enough that tenants
 * sending one mailbox their reserves add little to the cap. A constant: no deployment has asked
 * for another figure, and 0 would bring back the shut-out it prevents.
 */
export const MAILBOX_RESERVE = 2

/**
 * The service-wide bucket of a mailbox in a lane. Live and sandbox traffic are counted apart:
 * sandbox keys send no mail, and a public sandbox key must not use up a real person's
 * allowance. Each lane has its own, so that strangers filling the browser lane's cap through
 * several tenants' public keys cannot stop the partners' backends from reaching the owner; and
 * each tenant its reserve inside it, so that other tenants filling it (with accounts of their
 * own, secret keys included) cannot either.
 */
function mailboxLimit (policy: AdmissionPolicy, mode: KeyMode, subject: string): DispatchPlan['mailbox'] {
  if (policy.mailbox === null) return null
  return { name: 'mailbox', mode, bucket: subject, max: policy.mailbox.max, windowMs: policy.mailbox.windowMs, reserve: MAILBOX_RESERVE }
}

export interface DispatchRequest {
  key: TenantKey
  /** The caller's own limits (`refusalPlan`), built once for the request. */
  ownLimits: readonly LimitHit[]
  /** The keyed tag of the recipient's canonical mailbox. */
  recipientTag: string
  token: DispatchPlan['token']
  nowMs: number
}

export function dispatchPlan (policy: AdmissionPolicy, request: DispatchRequest): DispatchPlan {
  const { key, ownLimits, recipientTag, token, nowMs } = request
  const { tenant, mode } = key
  const lane = laneOf(key)
  const subject = laneSubject(lane, recipientTag)
  const allowance = tenant.tier[mode]
  const scope = tenantScope(tenant.id, mode)
  return {
    lane,
    recipient: { tenantId: tenant.id, mode, recipientTag },
    // A page must not tell a suppressed mailbox from one whose delivery failed: its dispatch
    // counts and writes what a failed one does, then is taken back like one.
    suppression: lane === 'browser' ? 'withhold' : 'refuse',
    laneSubject: subject,
    ownLimits,
    // The recipient's bucket before the key's: a dispatch refused for its recipient does not
    // use up the key's bucket for every other caller.
    sharedLimits: [tenantLimit(policy, key, 'recipient', subject), tenantLimit(policy, key, 'key', key.id)],
    mailbox: mailboxLimit(policy, mode, subject),
    quota: {
      tenant: { scope, share: null, limit: allowance.limit, window: allowance.window },
      share: key.allowanceShare === null ? null : { scope, share: key.id, limit: Math.floor(allowance.limit * key.allowanceShare), window: allowance.window },
      nowMs,
      description: `${isSandbox(mode) ? 'sandbox' : 'live'} allowance of tier "${tenant.tier.name}" (${allowance.limit} per ${allowance.window.spec})`
    },
    token
  }
}

export interface VerifyRequest {
  key: TenantKey
  /** The caller's own limits (`refusalPlan`), built once for the request. */
  ownLimits: readonly LimitHit[]
  requestId: string
  storedForms: readonly string[]
}

export function verifyPlan (policy: AdmissionPolicy, request: VerifyRequest): VerifyPlan {
  const { key, ownLimits, requestId, storedForms } = request
  return {
    lane: laneOf(key),
    ownLimits,
    sharedLimits: [tenantLimit(policy, key, 'key', key.id)],
    token: { tenantId: key.tenant.id, mode: key.mode, requestId },
    storedForms,
    lockout: policy.lockout
  }
}

/** The caller's own limits: what a refused request counts against, and what a dispatch or verify counts first. */
export function refusalPlan (policy: AdmissionPolicy, requester: Requester): RefusalPlan {
  return { lane: laneOf(requester.key), limits: ownLimits(policy, requester) }
}
