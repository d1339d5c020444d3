import { createHmac, createSecretKey, type KeyObject } from 'node:crypto'
import type { MacKey } from '../keys/mac-key.js'
import type { KeyMode } from '../keys/api-keys.js'

/** What a code is bound to: a code issued in one scope never verifies in another. */
export interface CodeScope {
  tenantId: string
  mode: KeyMode
  requestId: string
}

/**
 * HMAC-SHA256 truncated to 128 bits (RFC 2104 allows truncation to half the output): forging
 * one blind still takes 2^128 tries against a code space of 10^6. With the 96-bit recipient
 * tag (lib/recipients/tag.ts), a record (`k1.<22>|<16>`) stays within the 44 bytes Redis
 * stores in one allocation with its object header, which is what keeps a live code under 200
 * bytes of Redis memory.
 */
export const MAC_BYTES = 16

/**
 * Keyed hashes of codes. Only `keyId.mac` is ever stored: without the server key, a leaked
 * store cannot be brute-forced offline even though a code has only a million values.
 * The first key signs; every key verifies, so keys rotate without invalidating live codes.
 */
export class CodeSigner {
  readonly #signingKey: { id: string, secret: KeyObject }
  readonly #keys: ReadonlyMap<string, KeyObject>

  constructor (keys: readonly MacKey[]) {
    // KeyObjects made once: on Node 24 createHmac with a Buffer key builds one per call
    // (~10.8 µs against ~2.2 µs with a KeyObject, which costs the same on Node 20).
    this.#keys = new Map(keys.map((key) => [key.id, createSecretKey(key.secret)]))
    const [first] = keys
    const firstSecret = first === undefined ? undefined : this.#keys.get(first.id)
    if (first === undefined || firstSecret === undefined) throw new Error('CodeSigner needs at least one key')
    this.#signingKey = { id: first.id, secret: firstSecret }
  }

  sign (scope: CodeScope, code: string): string {
    return `${this.#signingKey.id}.${mac(this.#signingKey.secret, scope, code).toString('base64url')}`
  }

  /**
   * The stored form `keyId.mac` this guess would have under each verifying key, for a store
   * that compares inside Redis. Always one HMAC per key, whatever the guess.
   */
  storedForms (scope: CodeScope, guess: string): string[] {
    return Array.from(this.#keys, ([id, secret]) => `${id}.${mac(secret, scope, guess).toString('base64url')}`)
  }
}

function mac (secret: KeyObject, scope: CodeScope, code: string): Buffer {
  return createHmac('sha256', secret)
    .update(`${scope.tenantId}\0${scope.mode}\0${scope.requestId}\0${code}`)
    .digest()
    .subarray(0, MAC_BYTES)
}
