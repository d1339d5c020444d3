import { createHmac, randomBytes, randomInt } from 'node:crypto'

export interface MacKey {
  id: string
  secret: Buffer
}

/** What a code is bound to: a code issued in one scope never verifies in another. */
export interface CodeScope {
  tenantId: string
  mode: 'live' | 'test'
  requestId: string
}

/** Six ASCII digits from a CSPRNG, leading zeros kept. */
export function generateCode (): string {
  return randomInt(0, 1_000_000).toString().padStart(6, '0')
}

/** 128 bits: as many as the MAC, more than a UUID's 122. */
export const REQUEST_ID_BYTES = 16
/**
 * CSPRNG bytes drawn for many requestIds at once, each byte used once: one call into OpenSSL
 * per 512 ids instead of one per id.
 */
const RANDOM_POOL_BYTES = REQUEST_ID_BYTES * 512
let randomPool = Buffer.alloc(0)
let randomPoolOffset = 0

/** 128 bits from a CSPRNG, URL-safe, 26 characters. */
export function generateRequestId (): string {
  if (randomPoolOffset + REQUEST_ID_BYTES > randomPool.length) {
    randomPool = randomBytes(RANDOM_POOL_BYTES)
    randomPoolOffset = 0
  }
  const id = 'otp_' + randomPool.toString('base64url', randomPoolOffset, randomPoolOffset + REQUEST_ID_BYTES)
  randomPoolOffset += REQUEST_ID_BYTES
  return id
}

/**
 * HMAC-SHA256 truncated to 128 bits (RFC 2104 allows truncation to half the output): forging
 * one blind still takes 2^128 tries against a code space of 10^6. With the 96-bit recipient
 * tag, a record (`k1.<22>|<16>`) stays within the 44 bytes Redis stores in one allocation
 * with its object header, which is what keeps a live code under 200 bytes of Redis memory.
 */
export const MAC_BYTES = 16
/** Enough to keep recipients apart: two collide in a tenant's limits only past ~2^48 of them. */
export const TAG_BYTES = 12

/**
 * Keyed hashes of codes. Only `keyId.mac` is ever stored: without the server key, a leaked
 * store cannot be brute-forced offline even though a code has only a million values.
 * The first key signs; every key verifies, so keys rotate without invalidating live codes.
 */
export class CodeSigner {
  readonly #signingKey: MacKey
  readonly #keys: ReadonlyMap<string, Buffer>

  constructor (keys: readonly MacKey[]) {
    const [first] = keys
    if (first === undefined) throw new Error('CodeSigner needs at least one key')
    this.#signingKey = first
    this.#keys = new Map(keys.map((key) => [key.id, key.secret]))
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

  /** A keyed, non-reversible tag for a recipient, so stores never hold addresses. */
  tag (value: string): string {
    return createHmac('sha256', this.#signingKey.secret).update('recipient\0').update(value).digest().toString('base64url', 0, TAG_BYTES)
  }
}

function mac (secret: Buffer, scope: CodeScope, code: string): Buffer {
  return createHmac('sha256', secret)
    .update(`${scope.tenantId}\0${scope.mode}\0${scope.requestId}\0${code}`)
    .digest()
    .subarray(0, MAC_BYTES)
}
