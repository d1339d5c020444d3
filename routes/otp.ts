import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { callerOf } from '../plugins/services.js'
import { bodyErrors, commonErrors, errorResponses } from '../schemas/errors.js'
import { DispatchBody, DispatchReply, DispatchHeaders, VerifyBody, VerifyHeaders, VerifyReply } from '../schemas/otp.js'
import { ref } from '../schemas/ref.js'

const security = [{ bearerAuth: [] }]

const otpRoutes: FastifyPluginAsyncTypebox = async function otpRoutes (fastify) {
  fastify.post('/otp/request', {
    config: { idempotent: true, captcha: true },
    schema: {
      operationId: 'dispatchCode',
      summary: 'Send a 6-digit code to an email address',
      description: 'Issues a code bound to the returned requestId and mails it. A second dispatch to the same address issues an independent requestId; earlier codes stay valid until used or expired. When delivery fails (502) the code is destroyed before the answer and nothing is charged. A tenant whose live mail bounced or drew complaints past the service\'s thresholds has its live dispatches refused with 403 `TENANT_SENDING_PAUSED` until the operator resumes it (docs/reputation.md); its sandbox keys keep working.',
      tags: ['otp'],
      security,
      headers: DispatchHeaders,
      body: ref(DispatchBody),
      response: {
        200: ref(DispatchReply, { description: 'The code was mailed (sandbox keys: kept in the sandbox inbox). Keep `data.requestId` for verify.' }),
        ...errorResponses([...commonErrors, ...bodyErrors, 'INVALID_EMAIL', 'RECIPIENT_BLOCKED', 'RECIPIENT_SUPPRESSED', 'TENANT_SENDING_PAUSED', 'CAPTCHA_REQUIRED', 'CAPTCHA_INVALID', 'RATE_LIMITED', 'QUOTA_EXCEEDED', 'IDEMPOTENCY_IN_FLIGHT', 'IDEMPOTENCY_OUTCOME_UNKNOWN', 'IDEMPOTENCY_MISMATCH', 'IDEMPOTENCY_KEY_UNSCOPED', 'DELIVERY_FAILED'])
      }
    }
  }, async function dispatch (request, reply) {
    const sent = await fastify.otp.dispatch(callerOf(request), {
      email: request.body.email,
      locale: request.body.locale,
      acceptLanguage: request.headers['accept-language'],
      beforeSend: request.idempotency?.beforeSend
    })
    reply.headers(sent.headers)
    return { success: true as const, message: 'Verification code sent', data: { requestId: sent.requestId } }
  })

  fastify.post('/otp/verify', {
    schema: {
      operationId: 'verifyCode',
      summary: 'Check a guess against the code of a requestId',
      description: 'Every call consumes the code of its requestId, right or wrong: a code can be tried once. Unknown, expired, used, other-tenant and wrong guesses all answer the same 400 `CODE_MISMATCH`.',
      tags: ['otp'],
      security,
      headers: VerifyHeaders,
      body: ref(VerifyBody),
      response: {
        200: ref(VerifyReply, { description: 'The guess matched: the person controls the address. The code is used up.' }),
        ...errorResponses([...commonErrors, ...bodyErrors, 'CODE_MISMATCH', 'INVALID_CODE_FORMAT', 'RATE_LIMITED'])
      }
    }
  }, async function verify (request, reply) {
    const checked = await fastify.otp.verify(callerOf(request), request.body.requestId, request.body.userGuess)
    reply.headers(checked.headers)
    return { success: true as const, message: 'Code verified', data: { receipt: checked.receipt } }
  })
}

export default otpRoutes
