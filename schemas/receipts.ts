import { Type, type Static } from '@sinclair/typebox'

/** A compact JWS: three base64url parts. */
export const RECEIPT_PATTERN = '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$'

/** The JOSE `typ` of a receipt, so that no other JWT of the issuer can pass for one. */
export const RECEIPT_TYPE = 'otp-receipt+jwt'

export const Receipt = Type.String({
  pattern: RECEIPT_PATTERN,
  maxLength: 2048,
  description: 'A signed proof of this verification: a compact JWS (header `typ` `otp-receipt+jwt`, `alg` EdDSA or ES256, `kid` from /.well-known/jwks.json) valid for RECEIPT_TTL_SECONDS (5 minutes by default). Send it to your backend, which redeems it once with POST /otp/receipts/redeem or checks it itself against the JWKS. It holds no address and no code.',
  examples: ['eyJhbGciOiJFZERTQSIsImtpZCI6Ii4uLiIsInR5cCI6Im90cC1yZWNlaXB0K2p3dCJ9.eyJ0ZW5hbnQiOiJhY21lIn0.c2lnbmF0dXJl']
})

export const ReceiptClaims = Type.Object({
  iss: Type.String({ description: 'The issuer: RECEIPT_ISSUER.' }),
  aud: Type.String({ description: 'The tenant id, as a JWT audience.' }),
  tenant: Type.String({ description: 'The tenant id.' }),
  mode: Type.Union([Type.Literal('live'), Type.Literal('test')], { description: 'The mode of the key that verified: `test` is the sandbox.' }),
  requestId: Type.String({ description: 'The requestId that was verified.' }),
  addressHash: Type.String({ pattern: '^[A-Za-z0-9_-]{22}$', description: 'base64url of the first 16 bytes of HMAC-SHA256(tenant address hash key, lower-cased address): compare it with the address your user claims.' }),
  iat: Type.Integer({ description: 'Issued at (seconds since the epoch).' }),
  exp: Type.Integer({ description: 'Expires at (seconds since the epoch).' }),
  jti: Type.String({ description: 'Unique receipt id; a receipt redeems once.' }),
  epoch: Type.Optional(Type.String({ description: 'The redemption epoch the receipt was issued in. It changes when the service may have lost its record of redemptions (a restart of the embedded default, Redis losing its data): a receipt of an earlier epoch, or without one, is refused by redeem with 409 RECEIPT_NOT_REDEEMABLE. Opaque; a backend that checks receipts itself can ignore it.' }))
}, { additionalProperties: false })

export type ReceiptClaimsType = Static<typeof ReceiptClaims>

export const RedeemBody = Type.Object({
  receipt: Receipt,
  email: Type.Optional(Type.String({
    minLength: 1,
    maxLength: 1024,
    description: 'The address your user claims: the receipt redeems only if it was issued for this address (400 RECEIPT_ADDRESS_MISMATCH otherwise, and the receipt stays unredeemed). Required unless `anyAddress` is true.',
    examples: ['ada@example.com']
  })),
  anyAddress: Type.Optional(Type.Literal(true, {
    description: 'Redeem without checking the address: the receipt then proves only that someone verified some address of this tenant. For a backend that compares the `addressHash` claim itself. Without it, a body with no `email` is refused (400 RECEIPT_ADDRESS_REQUIRED), so that a backend cannot forget the address by accident.'
  }))
}, { $id: 'RedeemRequest', additionalProperties: false })

export const RedeemReply = Type.Object({
  success: Type.Literal(true),
  message: Type.String(),
  data: Type.Object({ claims: ReceiptClaims })
}, { $id: 'RedeemReply' })

const PublicJwk = Type.Object({
  kty: Type.Union([Type.Literal('OKP'), Type.Literal('EC')]),
  crv: Type.Union([Type.Literal('Ed25519'), Type.Literal('P-256')]),
  x: Type.String(),
  y: Type.Optional(Type.String()),
  kid: Type.String(),
  alg: Type.Union([Type.Literal('EdDSA'), Type.Literal('ES256')]),
  use: Type.Literal('sig')
}, { additionalProperties: false })

export const JwksReply = Type.Object({
  keys: Type.Array(PublicJwk, { description: 'Public keys of every configured receipt signing key: the first signs, the others still verify receipts they signed.' })
}, { $id: 'Jwks', additionalProperties: false })

export type PublicJwkType = Static<typeof PublicJwk>
export type JwksType = Static<typeof JwksReply>
