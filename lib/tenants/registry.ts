import { hashKey, parseKey } from '../keys/api-keys.js'
import type { Tenant, TenantKey } from './tenant.js'

/**
 * Tenants, tiers and keys, indexed by key hash. Immutable: a reload builds a new registry
 * and swaps the reference, so requests in flight finish on the one they started with.
 * lib/tenants-file/load.ts builds it from a tenants file.
 */
export class TenantRegistry {
  readonly #keysByHash: ReadonlyMap<string, TenantKey>
  readonly tenants: ReadonlyMap<string, Tenant>

  /** What loading noticed without refusing the file (expired review addresses), for the log. */
  readonly warnings: readonly string[]

  /** The version of the file it was read from (tenantsFileVersion); null when not read from a file. */
  readonly version: string | null

  constructor (keysByHash: ReadonlyMap<string, TenantKey>, tenants: ReadonlyMap<string, Tenant>, warnings: readonly string[] = [], version: string | null = null) {
    this.#keysByHash = keysByHash
    this.tenants = tenants
    this.warnings = warnings
    this.version = version
  }

  /**
   * The key record for a presented key, or null. Unknown, revoked, expired and malformed
   * keys are all null: callers answer one identical 401.
   */
  authenticate (presented: string, nowMs: number): TenantKey | null {
    const claimed = parseKey(presented)
    if (claimed === null) return null
    const key = this.#keysByHash.get(hashKey(presented))
    if (key === undefined || key.revoked || key.kind !== claimed.kind || key.mode !== claimed.mode) return null
    if (key.expiresAtMs !== null && key.expiresAtMs <= nowMs) return null
    return key
  }
}
