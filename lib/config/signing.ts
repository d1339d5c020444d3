import { randomBytes } from 'node:crypto'
import type { Env } from '../../schemas/env.js'
import type { MacKey } from '../keys/mac-key.js'
import { parseReceiptSigningKeys, type ReceiptKeyMaterial } from '../receipts/signing-keys.js'
import { durationSeconds } from './env.js'
import { ConfigError } from './error.js'

/** The keys that sign codes and receipts and tag recipients, and how long codes and receipts live. */
export interface SigningConfig {
  hmacKeys: MacKey[]
  /** True when no OTP_HMAC_KEYS was given and a process-local key was generated. */
  hmacKeyGenerated: boolean
  /**
   * The key of recipient tags and derived address hashes (RECIPIENT_TAG_KEY), which never
   * rotates with `hmacKeys`. Unset, the secret of the only HMAC key, whose id `borrowedFrom`
   * names (null when the variable is set, or on the embedded default's per-process key).
   * `accept`: RECIPIENT_TAG_KEY_ACCEPT, the fingerprint of a new key to adopt over the one
   * Redis's data was written under.
   */
  recipientTagKey: { secret: Buffer, borrowedFrom: string | null, accept: string | null }
  otpTtlSeconds: number
  receipts: {
    /** Null: derived from the HMAC keys (see lib/receipts/signing-keys.ts). */
    signingKeys: ReceiptKeyMaterial[] | null
    issuer: string
    ttlSeconds: number
  }
}

/**
 * `redisVariable`: the variable that chose Redis, null on the embedded default, where a
 * per-process key may stand in (every instance on Redis must sign with the same one).
 */
export function signingConfig (env: Env, redisVariable: string | null): SigningConfig {
  const hmacKeys = env.OTP_HMAC_KEYS === undefined ? null : signingFirst('OTP_HMAC_SIGNING_KEY', 'OTP_HMAC_KEYS', parseMacKeys(env.OTP_HMAC_KEYS), (key) => key.id, env.OTP_HMAC_SIGNING_KEY)
  if (hmacKeys === null && env.OTP_HMAC_SIGNING_KEY !== undefined) throw new ConfigError('OTP_HMAC_SIGNING_KEY', 'is only used with OTP_HMAC_KEYS')
  if (hmacKeys === null && redisVariable !== null) {
    throw new ConfigError('OTP_HMAC_KEYS', `is required when ${redisVariable} is set: every instance must sign codes with the same key`)
  }
  const recipientTagKey = recipientTagKeyOf(env, hmacKeys)
  if (redisVariable === null && recipientTagKey.accept !== null) {
    throw new ConfigError('RECIPIENT_TAG_KEY_ACCEPT', 'is only used with Redis: the embedded default keeps nothing across restarts for a key to be compared with')
  }
  const receiptSigningKeys = receiptSigningKeysOf(env)
  return {
    hmacKeys: hmacKeys ?? [{ id: 'ephemeral', secret: randomBytes(32) }],
    hmacKeyGenerated: hmacKeys === null,
    recipientTagKey,
    otpTtlSeconds: durationSeconds(env, 'OTP_TTL_SECONDS'),
    receipts: { signingKeys: receiptSigningKeys, issuer: env.RECEIPT_ISSUER, ttlSeconds: durationSeconds(env, 'RECEIPT_TTL_SECONDS') }
  }
}

/** RECEIPT_SIGNING_KEYS, the signing one first; null: derived from the HMAC keys. */
function receiptSigningKeysOf (env: Env): ReceiptKeyMaterial[] | null {
  if (env.RECEIPT_SIGNING_KEYS === undefined) {
    if (env.RECEIPT_SIGNING_KEY !== undefined) throw new ConfigError('RECEIPT_SIGNING_KEY', 'is only used with RECEIPT_SIGNING_KEYS (derived receipt keys follow OTP_HMAC_SIGNING_KEY)')
    return null
  }
  let keys: ReceiptKeyMaterial[]
  try {
    keys = parseReceiptSigningKeys(env.RECEIPT_SIGNING_KEYS)
  } catch (error) {
    throw new ConfigError('RECEIPT_SIGNING_KEYS', (error as Error).message)
  }
  return signingFirst('RECEIPT_SIGNING_KEY', 'RECEIPT_SIGNING_KEYS', keys, (key) => key.kid, env.RECEIPT_SIGNING_KEY)
}

/**
 * The keys with the one that signs first (the signers sign with the first): `selector` names
 * it, else the list's first signs. The others only verify (or, for receipts, are only
 * published): the first phase of a rotation that old and new instances survive side by side.
 */
function signingFirst<T> (selector: string, list: string, keys: T[], idOf: (key: T) => string, chosen: string | undefined): T[] {
  if (chosen === undefined) return keys
  const signing = keys.find((key) => idOf(key) === chosen)
  if (signing === undefined) throw new ConfigError(selector, `names no key of ${list} (got ${JSON.stringify(chosen)}; ids: ${keys.map(idOf).join(', ')})`)
  return [signing, ...keys.filter((key) => key !== signing)]
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/

/**
 * RECIPIENT_TAG_KEY, else the secret of the only OTP_HMAC_KEYS key, whose tags Redis already
 * holds (the service tagged recipients with the signing key before the variable existed).
 * With several keys, which one would depend on the phase of a rotation, so it must be named.
 */
function recipientTagKeyOf (env: Env, hmacKeys: MacKey[] | null): SigningConfig['recipientTagKey'] {
  const accept = env.RECIPIENT_TAG_KEY_ACCEPT ?? null
  if (env.RECIPIENT_TAG_KEY !== undefined) {
    const secret = Buffer.from(env.RECIPIENT_TAG_KEY, 'base64')
    if (!BASE64.test(env.RECIPIENT_TAG_KEY) || secret.length < 32) {
      throw new ConfigError('RECIPIENT_TAG_KEY', 'must be base64 of at least 32 bytes (openssl rand -base64 32)')
    }
    return { secret, borrowedFrom: null, accept }
  }
  if (hmacKeys === null) return { secret: randomBytes(32), borrowedFrom: null, accept }
  const [only, ...others] = hmacKeys
  if (only === undefined || others.length > 0) {
    throw new ConfigError('RECIPIENT_TAG_KEY', `is required when OTP_HMAC_KEYS lists more than one key (ids: ${hmacKeys.map((key) => key.id).join(', ')}): set it to the secret of the key that signed before the rotation began, so that suppressions, lockouts and recipient counts keep their keys (UPGRADING.md)`)
  }
  return { secret: only.secret, borrowedFrom: only.id, accept }
}

const MAC_KEY_ID = /^[A-Za-z0-9_-]{1,16}$/

function parseMacKeys (value: string): MacKey[] {
  const keys: MacKey[] = []
  for (const entry of value.split(',')) {
    const separator = entry.indexOf(':')
    const id = entry.slice(0, separator).trim()
    const secret = Buffer.from(entry.slice(separator + 1).trim(), 'base64')
    if (separator < 1 || !MAC_KEY_ID.test(id)) {
      throw new ConfigError('OTP_HMAC_KEYS', 'must be comma-separated id:secret pairs with ids of 1-16 letters, digits, - or _')
    }
    if (secret.length < 32) {
      throw new ConfigError('OTP_HMAC_KEYS', `key "${id}" must be base64 of at least 32 bytes (openssl rand -base64 32)`)
    }
    if (keys.some((key) => key.id === id)) throw new ConfigError('OTP_HMAC_KEYS', `lists key id "${id}" twice`)
    keys.push({ id, secret })
  }
  return keys
}
