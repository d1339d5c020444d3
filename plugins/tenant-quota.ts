import fp from 'fastify-plugin'
import { apiError } from '../lib/errors.js'
import { tenantScope, type KeyMode } from '../lib/tenants/api-keys.js'
import { MemoryQuotaStore } from '../lib/quota/memory-quota-store.js'
import type { QuotaDecision, QuotaStore } from '../lib/quota/quota-store.js'
import type { QuotaWindow } from '../lib/quota/window.js'
import { RedisQuotaStore } from '../lib/quota/redis-quota-store.js'
import { storeCall } from '../lib/store-errors.js'
import type { Tenant } from '../lib/tenants/registry.js'

export interface Reservation {
  windowId: string
  headers: Record<string, string>
}

export interface UsageReport {
  limit: number
  used: number
  remaining: number
  window: string
  resetsAt: string
}

export interface TenantQuota {
  /** Where quota counts live; the admission step reserves in it. */
  readonly store: QuotaStore
  /** The allowance a dispatch made at `nowMs` takes one unit of. */
  allowance (tenant: Tenant, mode: KeyMode, nowMs: number): { scope: string, limit: number, window: QuotaWindow, nowMs: number }
  /** The reservation with its Quota-* headers, or 402 QUOTA_EXCEEDED with them when refused. */
  settle (tenant: Tenant, mode: KeyMode, decision: QuotaDecision, nowMs: number): Reservation
  /** Gives the unit back: a dispatch whose mail did not leave is not charged. */
  refund (tenant: Tenant, mode: KeyMode, reservation: Reservation): Promise<void>
  usage (tenant: Tenant, mode: KeyMode): Promise<UsageReport>
}

declare module 'fastify' {
  interface FastifyInstance {
    quota: TenantQuota
  }
}

function quotaHeaders (limit: number, remaining: number, resetMs: number, nowMs: number): Record<string, string> {
  return {
    'quota-limit': String(limit),
    'quota-remaining': String(remaining),
    // Seconds until the allowance returns, as RateLimit-Reset counts them.
    'quota-reset': String(Math.max(0, Math.ceil((resetMs - nowMs) / 1000)))
  }
}

/**
 * The volume allowance of each tenant's billing tier, live and sandbox counted apart.
 * Counts live in Redis when configured (atomic across instances), else in memory.
 */
export default fp(async function tenantQuotaPlugin (fastify) {
  const store: QuotaStore = fastify.redis === null ? new MemoryQuotaStore() : new RedisQuotaStore(fastify.redis)

  const quota: TenantQuota = {
    store,
    allowance (tenant, mode, nowMs) {
      const { limit, window } = tenant.tier[mode]
      return { scope: tenantScope(tenant.id, mode), limit, window, nowMs }
    },
    settle (tenant, mode, decision, nowMs) {
      const allowance = tenant.tier[mode]
      const headers = quotaHeaders(allowance.limit, decision.remaining, decision.resetMs, nowMs)
      if (!decision.allowed) {
        const which = mode === 'live' ? 'live' : 'sandbox'
        throw apiError('QUOTA_EXCEEDED', `The ${which} allowance of tier "${tenant.tier.name}" (${allowance.limit} per ${allowance.window.spec}) is used up until ${new Date(decision.resetMs).toISOString()}`, headers)
      }
      return { windowId: decision.windowId, headers }
    },
    async refund (tenant, mode, reservation) {
      await storeCall('quota', async () => { await store.refund(tenantScope(tenant.id, mode), reservation.windowId) })
    },
    async usage (tenant, mode) {
      const allowance = tenant.tier[mode]
      const now = Date.now()
      const usage = await storeCall('quota', async () => await store.usage(tenantScope(tenant.id, mode), allowance.window, now))
      return {
        limit: allowance.limit,
        used: usage.used,
        remaining: Math.max(0, allowance.limit - usage.used),
        window: allowance.window.spec,
        resetsAt: new Date(usage.resetMs).toISOString()
      }
    }
  }
  fastify.decorate('quota', quota)
}, { name: 'tenant-quota', dependencies: ['config', 'redis'], fastify: '5.x' })
