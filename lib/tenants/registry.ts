import { hashKey, parseKey } from '../keys/api-keys.js'
import type { KeyKind, KeyMode } from '../keys/api-keys.js'
import type { Tenant, TenantKey } from './tenant.js'

/** A tenant whose entry in the tenants file breaks a rule: refused alone, the others served. */
export interface RefusedTenant {
  id: string
  /** Every problem of its entry, each starting with its JSON pointer. */
  problems: readonly string[]
  /**
   * `previous`: it is served on its last good configuration (the file it was loaded from
   * before this one), with the keys the new entry still lists; `none`: its keys answer 503.
   */
  serving: 'previous' | 'none'
}

/** A key of a refused tenant that its last good configuration does not serve: it answers 503. */
export interface RefusedKey {
  tenant: string
  kind: KeyKind
  mode: KeyMode
  revoked: boolean
  expiresAtMs: number | null
}

/** What a presented key is: a served key, a key of a refused tenant, or nothing (401). */
export type Authentication = TenantKey | { refused: string } | null

/** The JSON pointer a problem of the tenants file starts with. */
export function problemPointer (problem: string): string {
  return /^\/[^\s:]*/.exec(problem)?.[0] ?? '/'
}

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

  /** Tenants refused by the file, by id (some still served on their last good configuration, in `tenants`). */
  readonly refused: ReadonlyMap<string, RefusedTenant>
  readonly #refusedKeys: ReadonlyMap<string, RefusedKey>

  constructor (keysByHash: ReadonlyMap<string, TenantKey>, tenants: ReadonlyMap<string, Tenant>, warnings: readonly string[] = [], version: string | null = null, refused: ReadonlyMap<string, RefusedTenant> = new Map(), refusedKeys: ReadonlyMap<string, RefusedKey> = new Map()) {
    this.#keysByHash = keysByHash
    this.tenants = tenants
    this.warnings = warnings
    this.version = version
    this.refused = refused
    this.#refusedKeys = refusedKeys
  }

  /** A tenant's served keys, with their hashes. */
  keysOf (tenantId: string): Array<[string, TenantKey]> {
    return [...this.#keysByHash].filter(([, key]) => key.tenant.id === tenantId)
  }

  /**
   * The key record for a presented key, or null. Unknown, revoked, expired and malformed
   * keys are all null: callers answer one identical 401.
   */
  authenticate (presented: string, nowMs: number): TenantKey | null {
    const found = this.identify(presented, nowMs)
    return found === null || 'refused' in found ? null : found
  }

  /**
   * What `authenticate` answers, and besides a key of a refused tenant, which the same checks
   * (kind, mode, revocation, expiry) would have let in: its caller learns why (503), not 401.
   */
  identify (presented: string, nowMs: number): Authentication {
    const claimed = parseKey(presented)
    if (claimed === null) return null
    const hash = hashKey(presented)
    const key = this.#keysByHash.get(hash) ?? this.#refusedKeys.get(hash)
    if (key === undefined || key.revoked || key.kind !== claimed.kind || key.mode !== claimed.mode) return null
    if (key.expiresAtMs !== null && key.expiresAtMs <= nowMs) return null
    return 'id' in key ? key : { refused: key.tenant }
  }
}
