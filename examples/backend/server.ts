// A sign-up backend that proves its user's email address with email-otp, calling it with a
// secret key and forwarding each end user's address. In your own project the import is
// `from '@email-otp/client'`.
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify'
import { fileURLToPath } from 'node:url'
import { createClient, EmailOtpError, type EmailOtpClient } from '../../clients/typescript/src/index.js'

/** Refusals the end user can act on (another address, another code, waiting): passed on as they are. */
const USER_ERRORS = new Set(['INVALID_EMAIL', 'RECIPIENT_BLOCKED', 'SOURCE_BLOCKED', 'RATE_LIMITED', 'CODE_MISMATCH', 'INVALID_CODE_FORMAT', 'INVALID_BODY'])

export function buildExample (otp: EmailOtpClient): FastifyInstance {
  // Behind your own proxies, set `trustProxy` to their addresses so that request.ip is the
  // end user's address and not the proxy's.
  const app = Fastify({ logger: true })

  app.post<{ Body: { email: string } }>('/signup/start', {
    schema: { body: { type: 'object', required: ['email'], additionalProperties: false, properties: { email: { type: 'string', minLength: 1, maxLength: 320 } } } }
  }, async (request) => {
    // End-User-IP: the service applies its block lists and per-source limits to this user,
    // not to this backend, which calls for everyone.
    const { requestId } = await otp.dispatch(request.body.email, { endUserIp: request.ip })
    // Keep the requestId with the pending sign-up (a session, say); the page only needs to
    // send it back with the code.
    return { requestId }
  })

  app.post<{ Body: { requestId: string, code: string } }>('/signup/finish', {
    schema: { body: { type: 'object', required: ['requestId', 'code'], additionalProperties: false, properties: { requestId: { type: 'string', minLength: 1, maxLength: 64 }, code: { type: 'string', minLength: 1, maxLength: 64 } } } }
  }, async (request) => {
    await otp.verify(request.body.requestId, request.body.code, { endUserIp: request.ip })
    // The address is proven: create the account or the session here.
    return { verified: true }
  })

  app.setErrorHandler<FastifyError | EmailOtpError>((error, request, reply) => {
    if (error instanceof EmailOtpError) {
      if (error.retryAfter !== undefined) void reply.header('retry-after', String(error.retryAfter))
      if (USER_ERRORS.has(error.code)) return reply.status(error.status).send({ error: error.code, message: error.message })
      // A wrong key, a used-up allowance, an outage: the operator's problem, not the user's.
      request.log.error({ code: error.code, status: error.status, traceId: error.traceId }, 'email-otp call failed')
      return reply.status(503).send({ error: 'VERIFICATION_UNAVAILABLE', message: 'Email verification is unavailable; try again later' })
    }
    if ('validation' in error && error.validation !== undefined) return reply.status(400).send({ error: 'INVALID_REQUEST', message: error.message })
    request.log.error({ err: error }, 'unexpected error')
    return reply.status(500).send({ error: 'INTERNAL', message: 'Internal error' })
  })

  return app
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const otp = createClient({
    baseUrl: process.env.EMAIL_OTP_URL ?? 'http://127.0.0.1:3000',
    // The demo tenant's public sandbox key; a real backend reads its own secret key.
    apiKey: process.env.EMAIL_OTP_KEY ?? 'sk_test_DemoSandboxKeyForLocalUseOnly000000000'
  })
  await buildExample(otp).listen({ host: process.env.HOST ?? '127.0.0.1', port: Number(process.env.PORT ?? 3001) })
}
