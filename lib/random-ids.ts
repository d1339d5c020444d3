import { randomBytes } from 'node:crypto'

/** 128 bits: as many as a code's MAC, more than a UUID's 122. */
export const ID_BYTES = 16

/**
 * CSPRNG bytes drawn for many ids at once, each byte used once: one call into OpenSSL per 512
 * ids instead of one per id (a call costs a few microseconds, as much as the rest of an id).
 */
const POOL_BYTES = ID_BYTES * 512
let pool = Buffer.alloc(0)
let offset = 0

/** 128 bits from a CSPRNG, base64url: 22 characters. */
export function randomId (): string {
  if (offset + ID_BYTES > pool.length) {
    pool = randomBytes(POOL_BYTES)
    offset = 0
  }
  const id = pool.toString('base64url', offset, offset + ID_BYTES)
  offset += ID_BYTES
  return id
}
