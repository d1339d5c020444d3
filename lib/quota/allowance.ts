import type { QuotaStore } from '../state/quota.js'
import type { KeyMode } from '../keys/api-keys.js'
import type { Tenant } from '../tenants/tenant.js'
import { tenantScope } from '../keys/scope.js'

/** A window's state after a reservation or a refund: how many units remain, and until when. */
export interface AllowanceState {
  remaining: number
  resetMs: number
}

/** The Quota-* headers of a dispatch answer; the reset in seconds, as RateLimit-Reset counts them. */
export function quotaHeaders (limit: number, state: AllowanceState, nowMs: number): Record<string, string> {
  return {
    'quota-limit': String(limit),
    'quota-remaining': String(state.remaining),
    'quota-reset': String(Math.max(0, Math.ceil((state.resetMs - nowMs) / 1000)))
  }
}

export interface UsageReport {
  limit: number
  used: number
  remaining: number
  window: string
  resetsAt: string
}

/** A tenant's allowance in one mode: its limit, what the current window has used, when it ends. */
export async function usageReport (store: QuotaStore, tenant: Tenant, mode: KeyMode, nowMs: number): Promise<UsageReport> {
  const allowance = tenant.tier[mode]
  const usage = await store.usage(tenantScope(tenant.id, mode), allowance.window, nowMs)
  return {
    limit: allowance.limit,
    used: usage.used,
    remaining: Math.max(0, allowance.limit - usage.used),
    window: allowance.window.spec,
    resetsAt: new Date(usage.resetMs).toISOString()
  }
}
