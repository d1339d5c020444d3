import type { KeyMode } from '../../lib/keys/api-keys.js'
import { tenantScope } from '../../lib/keys/scope.js'
import { parseWindow, type QuotaWindow } from '../../lib/limits/window.js'
import type { AdmissionStore, DispatchPlan, VerifyPlan } from '../../lib/state/admission.js'
import type { QuotaDecision } from '../../lib/state/quota.js'
import type { TokenRef } from '../../lib/state/tokens.js'

/*
 * Plans that exercise the token and the quota counters alone, for the stores' tests: they go
 * through the admission port, the way the service writes and takes tokens and reserves units.
 * No velocity limit, no mailbox cap, no suppression, a lockout threshold no test reaches.
 */

/** A tenant's traffic in one mode. */
export interface TenantMode {
  tenantId: string
  mode: KeyMode
}

export const ACME_LIVE: TenantMode = { tenantId: 'acme', mode: 'live' }

export function window (spec: string): QuotaWindow {
  const parsed = parseWindow(spec)
  if (parsed === null) throw new Error(`test setup: ${spec} should parse`)
  return parsed
}

/** What a dispatch reserves: the tenant's allowance and, for a restricted key, its share. */
export interface QuotaTerms {
  limit: number
  window: QuotaWindow
  nowMs: number
  share?: { keyId: string, limit: number } | null
}

const ROOMY: Omit<QuotaTerms, 'nowMs'> = { limit: 1_000_000, window: window('1h') }
const RECIPIENT = 'tag'

/** A token's record as the service writes it: stored form, lane subject, address hash. */
export function record (requestId: string): string {
  return `k1.form-${requestId}|${RECIPIENT}|hash-${requestId}`
}

/** The stored form `record(requestId)` verifies with. */
export function rightForm (requestId: string): string {
  return `k1.form-${requestId}`
}

export function tokenDispatch (tenant: TenantMode, requestId: string, options: { record?: string, ttlMs?: number, quota?: QuotaTerms } = {}): DispatchPlan {
  const { tenantId, mode } = tenant
  const scope = tenantScope(tenantId, mode)
  const terms = options.quota ?? { ...ROOMY, nowMs: Date.now() }
  const share = terms.share ?? null
  return {
    lane: 'backend',
    recipient: { tenantId, mode, recipientTag: RECIPIENT },
    suppression: 'refuse',
    laneSubject: RECIPIENT,
    ownLimits: [],
    sharedLimits: [],
    mailbox: null,
    quota: {
      tenant: { scope, share: null, limit: terms.limit, window: terms.window },
      share: share === null ? null : { scope, share: share.keyId, limit: share.limit, window: terms.window },
      nowMs: terms.nowMs,
      description: 'allowance'
    },
    token: { requestId, record: options.record ?? record(requestId), ttlMs: options.ttlMs ?? 60_000 }
  }
}

export function tokenVerify (tenant: TenantMode, requestId: string, storedForms: readonly string[]): VerifyPlan {
  return {
    lane: 'backend',
    ownLimits: [],
    sharedLimits: [],
    token: tokenRef(tenant, requestId),
    storedForms,
    lockout: { threshold: 1_000_000, baseMs: 1000, maxMs: 1000, resetAfterMs: 60_000 }
  }
}

export function tokenRef ({ tenantId, mode }: TenantMode, requestId: string): TokenRef {
  return { tenantId, mode, requestId }
}

let reservations = 0

/**
 * A dispatch that reserves a unit under `terms` (with a token of its own): the decision it
 * reports, allowed or not. Any other outcome fails the test.
 */
export async function reserve (admission: AdmissionStore, tenant: TenantMode, terms: QuotaTerms): Promise<QuotaDecision> {
  const counts = await admission.dispatch(tokenDispatch(tenant, `reservation-${++reservations}`, { quota: terms }))
  if (counts.kind !== 'issued' && counts.kind !== 'quota_exceeded') throw new Error(`a reservation came back ${counts.kind}`)
  return counts.quota
}
