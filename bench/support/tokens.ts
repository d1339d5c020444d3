import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'

/** The lifetime the service gives a code by default (OTP_TTL_SECONDS = 600). */
export const TOKEN_TTL_MS = 600_000

export interface TokenShape {
  key: string
  record: string
}

// Bytes per token: 18 for the requestId (24 base64url characters), 32 for the HMAC
// (43 characters), 16 for the recipient tag (22 characters).
const BYTES_PER_TOKEN = 18 + 32 + 16

/**
 * `count` tokens shaped exactly like the service's (lib/otp.ts, lib/code-signer.ts): key
 * `otp:bench:live:otp_<24>`, record `k1.<43>|<22>`, all base64url. Random bytes stand in for
 * the HMACs: same lengths and alphabet, without a million HMAC computations.
 */
export function tokenShapes (count: number): TokenShape[] {
  const bytes = randomBytes(count * BYTES_PER_TOKEN)
  const tokens: TokenShape[] = new Array<TokenShape>(count)
  for (let i = 0; i < count; i++) {
    const at = i * BYTES_PER_TOKEN
    tokens[i] = {
      key: `otp:bench:live:otp_${bytes.toString('base64url', at, at + 18)}`,
      record: `k1.${bytes.toString('base64url', at + 18, at + 50)}|${bytes.toString('base64url', at + 50, at + 66)}`
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
