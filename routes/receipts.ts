import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { apiError, type ApiError } from '../lib/errors.js'
import type { RedeemOutcome } from '../lib/receipts/receipts.js'
import { perKey, perSource } from '../plugins/external/rate-limit.js'
import { bodyErrors, commonErrors, connectionErrors, errorResponses } from '../schemas/errors.js'
import { JwksReply, RedeemBody, RedeemReply } from '../schemas/receipts.js'
import { ref } from '../schemas/ref.js'

/** Receipts live minutes; keys rotate over hours: a verifier may cache the key set this long. */
const JWKS_MAX_AGE_SECONDS = 300

/** The public keys that verify receipts: no key needed, cacheable, outside the API scope. */
export const jwksRoutes: FastifyPluginAsyncTypebox = async function jwksRoutes (fastify) {
  fastify.get('/.well-known/jwks.json', {
    config: { rateLimit: perSource(fastify.config.routeLimits.public) },
    schema: {
      operationId: 'getReceiptKeys',
      summary: 'Public keys that verify verification receipts (JWKS)',
      description: 'The first key signs new receipts; the others still verify receipts they signed. Fetch it with any JOSE library (`createRemoteJWKSet` in `jose`); no API key is needed.',
      tags: ['receipts'],
      security: [],
      response: {
        200: ref(JwksReply, { description: 'The key set, cacheable for five minutes.' }),
        ...errorResponses(connectionErrors)
      }
    }
  }, async (_request, reply) => {
    void reply.header('cache-control', `public, max-age=${JWKS_MAX_AGE_SECONDS}`)
    return fastify.receipts.jwks
  })
}

function refusal (outcome: Exclude<RedeemOutcome, { ok: true }>): ApiError {
  switch (outcome.refusal) {
    case 'invalid': return apiError('RECEIPT_INVALID')
    case 'other_tenant': return apiError('RECEIPT_INVALID', 'The receipt was issued to another tenant or mode')
    case 'expired': return apiError('RECEIPT_EXPIRED')
    case 'invalid_email': return apiError('INVALID_EMAIL', outcome.detail)
    case 'address_mismatch': return apiError('RECEIPT_ADDRESS_MISMATCH')
    case 'already_redeemed': return apiError('RECEIPT_ALREADY_REDEEMED')
    case 'not_redeemable': return apiError('RECEIPT_NOT_REDEEMABLE')
  }
}

const receiptRoutes: FastifyPluginAsyncTypebox = async function receiptRoutes (fastify) {
  fastify.post('/otp/receipts/redeem', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'redeemReceipt',
      summary: 'Check a verification receipt and use it up',
      description: "For the tenant's backend (secret keys only): checks the receipt's signature, expiry, tenant and mode (the key's), the address (`email`, required unless `anyAddress` is true), and marks it redeemed. A receipt redeems once in its lifetime: a second redemption answers 409 RECEIPT_ALREADY_REDEEMED, and a receipt issued before the service lost its record of redemptions (a restart of the embedded default, Redis losing its data) answers 409 RECEIPT_NOT_REDEEMABLE, since whether it was redeemed can no longer be known. A receipt living longer than RECEIPT_TTL_SECONDS, or issued in the future (beyond 5 s of clock tolerance), is RECEIPT_INVALID even with a good signature.",
      tags: ['receipts'],
      security: [{ bearerAuth: [] }],
      body: ref(RedeemBody),
      response: {
        200: ref(RedeemReply, { description: 'The receipt was genuine, for this tenant, mode and address (any, with `anyAddress`), and is now used up. Its claims are returned.' }),
        ...errorResponses([...commonErrors, ...bodyErrors, 'KEY_NOT_PERMITTED', 'RECEIPT_INVALID', 'RECEIPT_EXPIRED', 'RECEIPT_ADDRESS_MISMATCH', 'RECEIPT_ADDRESS_REQUIRED', 'INVALID_EMAIL', 'RECEIPT_ALREADY_REDEEMED', 'RECEIPT_NOT_REDEEMABLE'])
      }
    }
  }, async function redeem (request) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    const { receipt, email, anyAddress } = request.body
    // Binding the address is the default: a backend that forgets it would trust any address.
    if (email === undefined && anyAddress !== true) throw apiError('RECEIPT_ADDRESS_REQUIRED')
    if (email !== undefined && anyAddress === true) throw apiError('INVALID_BODY', 'body: send either "email" or "anyAddress", not both')
    const outcome = await fastify.receipts.redeem(key, receipt, email)
    if (!outcome.ok) throw refusal(outcome)
    request.log.info({ tenant: key.tenant.id, mode: key.mode, keyId: key.id, requestId: outcome.claims.requestId }, 'receipt redeemed')
    return { success: true as const, message: 'Receipt redeemed', data: { claims: outcome.claims } }
  })
}

export default receiptRoutes
