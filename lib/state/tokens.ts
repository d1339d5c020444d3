import type { KeyMode } from '../keys/api-keys.js'

/** A code's token: its requestId, in the tenant and mode it was issued for. */
export interface TokenRef {
  tenantId: string
  mode: KeyMode
  requestId: string
}

/**
 * Where issued codes wait for their verify. Values are opaque records (a keyed hash and a
 * recipient tag), never a plaintext code. A token is written by an admitted dispatch and
 * consumed by a verify, both through the admission port (lib/state/admission.ts), in the same
 * step as the counters; this port holds what happens outside admission. Both adapters pass
 * test/lib/state/token-store.test.ts.
 */
export interface TokenStore {
  /** Removes the record, if any (a code whose mail did not leave). */
  delete (token: TokenRef): Promise<void>
  ready (): Promise<boolean>
}

/** Between the parts of a token's record; the verify script splits records on it too. */
export const TOKEN_RECORD_SEPARATOR = '|'

/**
 * What a token holds: the code's stored form (`keyId.mac`), the mailbox as its lane counts it
 * (the keyed tag of the recipient's mailbox, prefixed by `browser:` for a code a restricted
 * key asked for: see lib/admission/plan.ts, "Lanes"), since wrong guesses are counted per
 * mailbox and lane, and the tenant's keyed hash of the address (for the receipt and the events
 * of its verify, which knows only the requestId). Keyed hashes all three, never the code or
 * the address.
 */
export function tokenRecord (storedForm: string, laneSubject: string, addressHash: string): string {
  return [storedForm, laneSubject, addressHash].join(TOKEN_RECORD_SEPARATOR)
}

/**
 * The parts of a record. A record written before records carried the address hash has two
 * parts; its hash is null. A record written before lanes carries the bare tag: the backend
 * lane's subject.
 */
export function splitRecord (record: string): { storedForm: string, laneSubject: string, addressHash: string | null } {
  const [storedForm = '', laneSubject = '', addressHash = null] = record.split(TOKEN_RECORD_SEPARATOR, 3)
  return { storedForm, laneSubject, addressHash }
}
