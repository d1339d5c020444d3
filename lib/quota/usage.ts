import { SANDBOX_MODE } from '../keys/api-keys.js'
import { storeCall } from '../store-errors.js'
import type { Tenant } from '../tenants/tenant.js'
import { usageReport, type UsageReport } from './allowance.js'
import type { QuotaStore } from '../state/quota.js'

/** What GET /usage reports: the tenant's tier and both allowances in their current windows. */
export interface TenantUsage {
  tenant: string
  tier: string
  live: UsageReport
  sandbox: UsageReport
}

/** A tenant's use of its live and sandbox allowances, read from the quota store. */
export class UsageService {
  readonly #quota: QuotaStore

  constructor (quota: QuotaStore) {
    this.#quota = quota
  }

  async report (tenant: Tenant, nowMs: number): Promise<TenantUsage> {
    const [live, sandbox] = await storeCall('quota', async () => await Promise.all([
      usageReport(this.#quota, tenant, 'live', nowMs),
      usageReport(this.#quota, tenant, SANDBOX_MODE, nowMs)
    ]))
    return { tenant: tenant.id, tier: tenant.tier.name, live, sandbox }
  }
}
