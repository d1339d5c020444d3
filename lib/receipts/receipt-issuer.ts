import { sign } from 'node:crypto'
import { randomId } from '../random-ids.js'
import { Value } from '@sinclair/typebox/value'
import { createLocalJWKSet, errors, jwtVerify, type JWTVerifyGetKey } from 'jose'
import { RECEIPT_TYPE, ReceiptClaims, type JwksType, type ReceiptClaimsType } from '../../schemas/receipts.js'
import type { KeyMode } from '../keys/api-keys.js'
import type { ReceiptSigningKey } from './signing-keys.js'

/** What a receipt attests: one verification, of one requestId, for one address. */
export interface ReceiptSubject {
  tenant: string
  mode: KeyMode
  requestId: string
  addressHash: string
  /** The redemption epoch it is issued in (lib/state/redemptions.ts). */
  epoch: string
}

/** How far the issuer's and the checker's clocks may disagree, in seconds (expiry and issue time). */
export const RECEIPT_CLOCK_TOLERANCE_SECONDS = 5

export type ReceiptCheck =
  | { ok: true, claims: ReceiptClaimsType }
  | { ok: false, reason: 'invalid' | 'expired' }

export interface ReceiptIssuerOptions {
  /** Signing order: the first signs, every one verifies and is published. */
  keys: readonly ReceiptSigningKey[]
  issuer: string
  ttlSeconds: number
}

/**
 * Signs a JWS's signing input with a key made once (a KeyObject): EdDSA signs the input
 * itself, ES256 its SHA-256, as the 64-byte r‖s that JWS requires rather than DER.
 */
function signerOf (key: ReceiptSigningKey): (input: string) => Buffer {
  const { privateKey } = key
  return key.alg === 'EdDSA'
    ? (input) => sign(null, Buffer.from(input), privateKey)
    : (input) => sign('sha256', Buffer.from(input), { key: privateKey, dsaEncoding: 'ieee-p1363' })
}

/**
 * Signs verification receipts (compact JWS, signed synchronously with `node:crypto`: through
 * WebCrypto, as `jose` signs, a receipt cost as much again as the verify that earned it) and
 * checks them with `jose`: the first key signs, all keys verify and are published as a JWKS,
 * so a key can be rotated in front of the old one and removed once the receipts it signed
 * have expired.
 */
export class ReceiptIssuer {
  readonly jwks: JwksType
  /** The first key's protected header, encoded once: it is the same on every receipt. */
  readonly #header: string
  readonly #sign: (input: string) => Buffer
  readonly #keySet: JWTVerifyGetKey
  readonly #issuer: string
  readonly #ttlSeconds: number

  constructor (options: ReceiptIssuerOptions) {
    const [first] = options.keys
    if (first === undefined) throw new Error('ReceiptIssuer needs at least one key')
    this.#header = Buffer.from(JSON.stringify({ alg: first.alg, kid: first.kid, typ: RECEIPT_TYPE })).toString('base64url')
    this.#sign = signerOf(first)
    this.jwks = { keys: options.keys.map((key) => key.publicJwk) }
    this.#keySet = createLocalJWKSet(this.jwks)
    this.#issuer = options.issuer
    this.#ttlSeconds = options.ttlSeconds
  }

  /** The JWT: `typ` otp-receipt+jwt, the subject's claims, iss, aud (the tenant), iat, exp, jti. */
  issue (subject: ReceiptSubject, nowMs = Date.now()): string {
    const issuedAt = Math.floor(nowMs / 1000)
    const claims: ReceiptClaimsType = {
      tenant: subject.tenant,
      mode: subject.mode,
      requestId: subject.requestId,
      addressHash: subject.addressHash,
      epoch: subject.epoch,
      iss: this.#issuer,
      aud: subject.tenant,
      iat: issuedAt,
      exp: issuedAt + this.#ttlSeconds,
      jti: randomId()
    }
    const input = `${this.#header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`
    return `${input}.${this.#sign(input).toString('base64url')}`
  }

  /**
   * The claims of a receipt this service signed with a listed key, unexpired, of the right
   * type and shape, and no longer-lived than RECEIPT_TTL_SECONDS nor issued in the future
   * (beyond the clock tolerance): a receipt this service would have issued. So even a leaked
   * signing key cannot mint receipts that outlive its rotation. Anything else is `invalid`
   * (or `expired`), without saying more.
   */
  async check (token: string, nowMs = Date.now()): Promise<ReceiptCheck> {
    let payload: unknown
    try {
      ({ payload } = await jwtVerify(token, this.#keySet, {
        issuer: this.#issuer,
        typ: RECEIPT_TYPE,
        algorithms: ['EdDSA', 'ES256'],
        requiredClaims: ['iat', 'exp', 'jti', 'aud'],
        clockTolerance: RECEIPT_CLOCK_TOLERANCE_SECONDS,
        // Also refuses an `iat` in the future (beyond the tolerance).
        maxTokenAge: this.#ttlSeconds,
        currentDate: new Date(nowMs)
      }))
    } catch (error) {
      return { ok: false, reason: error instanceof errors.JWTExpired ? 'expired' : 'invalid' }
    }
    if (!Value.Check(ReceiptClaims, payload)) return { ok: false, reason: 'invalid' }
    const claims = payload
    if (claims.exp - claims.iat > this.#ttlSeconds) return { ok: false, reason: 'invalid' }
    return claims.aud === claims.tenant ? { ok: true, claims } : { ok: false, reason: 'invalid' }
  }
}
