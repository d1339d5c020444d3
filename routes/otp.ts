import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { describeEmailRejection, validateEmail } from '../lib/recipients/address.js'
import { apiError } from '../lib/errors.js'
import { composeVerificationMessage } from '../lib/mail/compose.js'
import { negotiateLocale } from '../lib/mail/locale.js'
import { DeliveryError } from '../lib/mail/transport.js'
import { commonErrors, errorResponses } from '../schemas/errors.js'
import { DispatchBody, DispatchReply, IdempotencyHeaders, VerifyBody, VerifyReply } from '../schemas/otp.js'

const security = [{ bearerAuth: [] }]

const otpRoutes: FastifyPluginAsyncTypebox = async function otpRoutes (fastify) {
  const { config, tokenStore, codeSigner, mailer, quota, abuseGuard, admission, metrics, receipts, webhooks } = fastify

  fastify.post('/otp/request', {
    config: { idempotent: true },
    schema: {
      operationId: 'dispatchCode',
      summary: 'Send a 6-digit code to an email address',
      description: 'Issues a code bound to the returned requestId and mails it. A second dispatch to the same address issues an independent requestId; earlier codes stay valid until used or expired. When delivery fails (502) the code is destroyed before the answer and nothing is charged.',
      tags: ['otp'],
      security,
      headers: IdempotencyHeaders,
      body: DispatchBody,
      response: {
        200: DispatchReply,
        ...errorResponses([...commonErrors, 'INVALID_EMAIL', 'RECIPIENT_BLOCKED', 'RATE_LIMITED', 'QUOTA_EXCEEDED', 'IDEMPOTENCY_IN_FLIGHT', 'IDEMPOTENCY_MISMATCH', 'DELIVERY_FAILED'])
      }
    }
  }, async function dispatch (request, reply) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    const checked = validateEmail(request.body.email)
    if (!checked.ok) throw apiError('INVALID_EMAIL', describeEmailRejection(checked.reason))

    const { tenant } = key
    abuseGuard.checkRecipient(key, checked.email.domain)
    const recipientTag = codeSigner.tag(checked.email.canonical)
    const addressHash = receipts.addressHash(tenant, checked.email.address)
    const ttlSeconds = tenant.ttlSeconds ?? config.otpTtlSeconds
    const issued = await admission.dispatch(request, reply, key, recipientTag, addressHash, ttlSeconds * 1000)
    reply.headers(issued.reservation.headers)
    try {
      await mailer.send(composeVerificationMessage({
        to: checked.email.address,
        from: tenant.from ?? config.mailFrom,
        ...(tenant.replyTo === null ? {} : { replyTo: tenant.replyTo }),
        brand: tenant.brandName,
        code: issued.code,
        ttlSeconds,
        locale: negotiateLocale(request.body.locale, request.headers['accept-language']),
        tags: { tenant: tenant.id, mode: key.mode }
      }), { mode: key.mode, tenantId: tenant.id, requestId: issued.requestId, code: issued.code })
    } catch (error) {
      // Nothing left: the code is destroyed before the answer so it can never verify, and the
      // unit is given back so the tenant pays only for mail that left.
      await Promise.all([
        tokenStore.delete(issued.storeKey),
        quota.refund(tenant, key.mode, issued.reservation)
      ]).catch((cleanupError: unknown) => {
        request.log.error({ err: cleanupError, requestId: issued.requestId }, 'cleanup after a failed dispatch failed (an unsent code expires by itself)')
      })
      if (!(error instanceof DeliveryError)) throw error
      metrics.dispatches.inc({ mode: key.mode, result: 'delivery_failed' })
      metrics.deliveryFailures.inc({ kind: error.kind })
      request.log.warn({ tenant: tenant.id, kind: error.kind, domain: checked.email.domain }, 'delivery failed')
      webhooks.emit(tenant, key.mode, 'delivery.failed', { requestId: issued.requestId, addressHash, reason: error.kind })
      throw apiError('DELIVERY_FAILED')
    }
    metrics.dispatches.inc({ mode: key.mode, result: 'sent' })
    request.log.info({ tenant: tenant.id, mode: key.mode, keyId: key.id, requestId: issued.requestId }, 'code dispatched')
    return { success: true as const, message: 'Verification code sent', data: { requestId: issued.requestId } }
  })

  fastify.post('/otp/verify', {
    schema: {
      operationId: 'verifyCode',
      summary: 'Check a guess against the code of a requestId',
      description: 'Every call consumes the code of its requestId, right or wrong: a code can be tried once. Unknown, expired, used, other-tenant and wrong guesses all answer the same 400 `CODE_MISMATCH`. A right guess answers a signed receipt for the backend (see POST /otp/receipts/redeem).',
      tags: ['otp'],
      security,
      body: VerifyBody,
      response: {
        200: VerifyReply,
        ...errorResponses([...commonErrors, 'CODE_MISMATCH', 'INVALID_CODE_FORMAT', 'RATE_LIMITED'])
      }
    }
  }, async function verify (request, reply) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    const { requestId } = request.body
    const { result, addressHash, lockedUntilMs } = await admission.verify(request, reply, key, requestId, request.body.userGuess)
    metrics.verifications.inc({ mode: key.mode, result })
    request.log.info({ tenant: key.tenant.id, mode: key.mode, requestId, result }, 'code checked')
    if (addressHash !== null && result !== 'verified') {
      webhooks.emit(key.tenant, key.mode, 'verification.failed', { requestId, addressHash, reason: result === 'malformed' ? 'malformed_code' : 'wrong_code' })
      if (lockedUntilMs !== null) webhooks.emit(key.tenant, key.mode, 'recipient.locked', { requestId, addressHash, lockedUntil: new Date(lockedUntilMs).toISOString() })
    }
    if (result === 'malformed') throw apiError('INVALID_CODE_FORMAT')
    if (result === 'mismatch' || addressHash === null) throw apiError('CODE_MISMATCH')
    webhooks.emit(key.tenant, key.mode, 'verification.succeeded', { requestId, addressHash })
    // Signed on success only: a wrong guess costs no signature.
    const receipt = await receipts.issue(key, requestId, addressHash)
    return { success: true as const, message: 'Code verified', data: { receipt } }
  })
}

export default otpRoutes
