import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import { REQUEST_ID_BYTES } from '../../lib/otp/codes.js'
import { MAC_BYTES } from '../../lib/otp/signer.js'
import { ADDRESS_HASH_BYTES } from '../../lib/receipts/address-hash.js'
import { TAG_BYTES } from '../../lib/recipients/tag.js'
import { tokenKey } from '../../lib/state/redis/keys.js'
import { tokenRecord, type TokenRef } from '../../lib/state/tokens.js'

/** The lifetime the service gives a code by default (OTP_TTL_SECONDS = 600). */
export const TOKEN_TTL_MS = 600_000

export interface TokenShape {
  token: TokenRef
  /** Its key in Redis. */
  key: string
  record: string
}

// Bytes per token: the requestId, the truncated HMAC, the recipient tag and the address hash, all base64url.
const BYTES_PER_TOKEN = REQUEST_ID_BYTES + MAC_BYTES + TAG_BYTES + ADDRESS_HASH_BYTES

/**
 * `count` tokens shaped exactly like the service's: a requestId of tenant `bench` in live mode
 * and its Redis key (lib/state/redis/keys.ts), the record `k1.<mac>|<tag>|<address hash>` with the sizes of
 * lib/otp/signer.ts, lib/recipients/tag.ts and lib/receipts/address-hash.ts.
 * Random bytes stand in for the HMACs: same lengths and alphabet, without a million HMAC
 * computations.
 */
export function tokenShapes (count: number): TokenShape[] {
  const bytes = randomBytes(count * BYTES_PER_TOKEN)
  const tokens: TokenShape[] = new Array<TokenShape>(count)
  for (let i = 0; i < count; i++) {
    const at = i * BYTES_PER_TOKEN
    const macAt = at + REQUEST_ID_BYTES
    const tagAt = macAt + MAC_BYTES
    const hashAt = tagAt + TAG_BYTES
    const token: TokenRef = { tenantId: 'bench', mode: 'live', requestId: `otp_${bytes.toString('base64url', at, macAt)}` }
    tokens[i] = {
      token,
      key: tokenKey(token.tenantId, token.mode, token.requestId),
      record: tokenRecord(`k1.${bytes.toString('base64url', macAt, tagAt)}`, bytes.toString('base64url', tagAt, hashAt), bytes.toString('base64url', hashAt, hashAt + ADDRESS_HASH_BYTES))
    }
  }
  return tokens
}

const PIPELINE = 10_000

/**
 * Writes `count` token-shaped entries with `SET key value PX ttl`, as RedisTokenStore does
 * (without NX: random keys do not collide), in pipelines of 10,000 commands. Returns the keys.
 */
export async function loadTokens (client: Redis, count: number): Promise<string[]> {
  const keys: string[] = []
  for (let done = 0; done < count; done += PIPELINE) {
    const pipeline = client.pipeline()
    for (const { key, record } of tokenShapes(Math.min(PIPELINE, count - done))) {
      pipeline.set(key, record, 'PX', TOKEN_TTL_MS)
      keys.push(key)
    }
    const replies = await pipeline.exec()
    const failed = replies?.find(([error]) => error !== null)
    if (failed !== undefined) throw new Error(`loading tokens failed: ${String(failed[0])}`)
  }
  return keys
}
