import type { KeyMode } from '../keys/api-keys.js'
import { scopeTag } from '../keys/scope.js'

/**
 * Where issued codes wait for their verify. Values are opaque records (a keyed hash and a
 * recipient tag), never a plaintext code. Both implementations pass
 * test/lib/tokens/token-store.test.ts. On Redis the admission scripts write and take tokens
 * with the Lua functions of redis-token-store.ts, in the same round trip as the counters.
 */
export interface TokenStore {
  /** Stores the record unless the key already exists; false on a collision. */
  put (key: string, record: string, ttlMs: number): Promise<boolean>
  /** Reads and removes the record in one atomic step: of concurrent takers, one gets it. */
  take (key: string): Promise<string | null>
  /** Removes the record, if any (a code whose mail did not leave). */
  delete (key: string): Promise<void>
  ready (): Promise<boolean>
}

/**
 * Tokens of different tenants and modes live under different keys and can never meet. The
 * tenant and mode are the Redis Cluster hash tag: a token shares its slot with the counters
 * its dispatch and verify touch, so each runs as one script (see lib/admission).
 */
export function tokenKey (tenantId: string, mode: KeyMode, requestId: string): string {
  return `otp:${scopeTag(tenantId, mode)}:${requestId}`
}

/**
 * What a token holds: the code's stored form (`keyId.mac`), the mailbox as its lane counts it
 * (the keyed tag of the recipient's mailbox, prefixed by `browser:` for a code a restricted
 * key asked for: see lib/admission/plan.ts, "Lanes"), since wrong guesses are counted per
 * mailbox and lane, and the tenant's keyed hash of the address (for the receipt and the events
 * of its verify, which knows only the requestId). Keyed hashes all three, never the code or
 * the address.
 */
export function tokenRecord (storedForm: string, laneSubject: string, addressHash: string): string {
  return `${storedForm}|${laneSubject}|${addressHash}`
}

/**
 * The parts of a record. A record written before records carried the address hash has two
 * parts; its hash is null. A record written before lanes carries the bare tag: the backend
 * lane's subject.
 */
export function splitRecord (record: string): { storedForm: string, laneSubject: string, addressHash: string | null } {
  const [storedForm = '', laneSubject = '', addressHash = null] = record.split('|', 3)
  return { storedForm, laneSubject, addressHash }
}

/** The tenant scope (`{acme:live}`) of a token's key: what the in-process store caps tokens per. */
export function tokenScope (key: string): string {
  return key.slice(0, key.indexOf('}') + 1)
}
