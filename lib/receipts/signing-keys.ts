import { createPrivateKey, createPublicKey, hkdfSync, type KeyObject } from 'node:crypto'
import { calculateJwkThumbprint, exportJWK } from 'jose'
import type { MacKey } from '../keys/mac-key.js'
import type { PublicJwkType } from '../../schemas/receipts.js'

export type ReceiptAlgorithm = 'EdDSA' | 'ES256'

/** A private key as configured: its id and the key. */
export interface ReceiptKeyMaterial {
  kid: string
  privateKey: KeyObject
}

/** A key ready to sign and to be published. */
export interface ReceiptSigningKey extends ReceiptKeyMaterial {
  alg: ReceiptAlgorithm
  publicJwk: PublicJwkType
}

const KID = /^[A-Za-z0-9_-]{1,64}$/

/** The algorithm a private key signs with, or null for a key type receipts do not use. */
export function algorithmOf (key: KeyObject): ReceiptAlgorithm | null {
  if (key.asymmetricKeyType === 'ed25519') return 'EdDSA'
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1') return 'ES256'
  return null
}

/**
 * RECEIPT_SIGNING_KEYS: `kid:base64(PKCS#8 DER)` pairs, comma-separated, Ed25519 or P-256
 * (`openssl genpkey -algorithm ed25519 -outform DER | base64 -w0`). Throws a message naming
 * the faulty entry, never its key.
 */
export function parseReceiptSigningKeys (value: string): ReceiptKeyMaterial[] {
  const keys: ReceiptKeyMaterial[] = []
  for (const entry of value.split(',')) {
    const separator = entry.indexOf(':')
    const kid = entry.slice(0, separator).trim()
    if (separator < 1 || !KID.test(kid)) throw new Error('must be comma-separated kid:key pairs with kids of 1-64 letters, digits, - or _')
    let privateKey: KeyObject
    try {
      privateKey = createPrivateKey({ key: Buffer.from(entry.slice(separator + 1).trim(), 'base64'), format: 'der', type: 'pkcs8' })
    } catch {
      throw new Error(`key "${kid}" is not the base64 of a PKCS#8 DER private key (openssl genpkey -algorithm ed25519 -outform DER | base64 -w0)`)
    }
    if (algorithmOf(privateKey) === null) throw new Error(`key "${kid}" must be an Ed25519 or P-256 key`)
    if (keys.some((key) => key.kid === kid)) throw new Error(`lists kid "${kid}" twice`)
    keys.push({ kid, privateKey })
  }
  return keys
}

/** The fixed PKCS#8 prefix of an Ed25519 private key (RFC 8410), before its 32-byte seed. */
const ED25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex')

/**
 * One Ed25519 key per OTP HMAC key, derived with HKDF under a label of its own, so that every
 * instance sharing OTP_HMAC_KEYS signs with the same published key and rotating the HMAC keys
 * rotates these with them. The kid is the key's JWK thumbprint (RFC 7638).
 */
export async function deriveReceiptSigningKeys (hmacKeys: readonly MacKey[]): Promise<ReceiptKeyMaterial[]> {
  return await Promise.all(hmacKeys.map(async (hmacKey) => {
    const seed = Buffer.from(hkdfSync('sha256', hmacKey.secret, Buffer.alloc(0), 'email-otp receipt signing key', 32))
    const privateKey = createPrivateKey({ key: Buffer.concat([ED25519_PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' })
    const kid = await calculateJwkThumbprint(await exportJWK(createPublicKey(privateKey)))
    return { kid, privateKey }
  }))
}

/** The public half of each key as a JWK, with what a verifier needs to pick it. */
export async function prepareSigningKeys (keys: readonly ReceiptKeyMaterial[]): Promise<ReceiptSigningKey[]> {
  return await Promise.all(keys.map(async ({ kid, privateKey }) => {
    const alg = algorithmOf(privateKey)
    if (alg === null) throw new Error(`receipt key "${kid}" must be Ed25519 or P-256`)
    const jwk = await exportJWK(createPublicKey(privateKey))
    const publicJwk = { kty: jwk.kty, crv: jwk.crv, x: jwk.x, ...(jwk.y === undefined ? {} : { y: jwk.y }), kid, alg, use: 'sig' } as PublicJwkType
    return { kid, privateKey, alg, publicJwk }
  }))
}
