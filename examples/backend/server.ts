// A sign-up backend that proves its user's email address with email-otp, calling it with a
// secret key and forwarding each end user's address. In your own project the import is
// `from '@email-otp/client'`.
import Fastify, { type FastifyError, type FastifyInstance, type FastifyRequest } from 'fastify'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { createClient, EmailOtpError, type EmailOtpClient } from '../../clients/typescript/src/index.js'

/** Refusals the end user can act on (another address, another code, waiting): passed on as they are. */
const USER_ERRORS = new Set(['INVALID_EMAIL', 'RECIPIENT_BLOCKED', 'SOURCE_BLOCKED', 'RATE_LIMITED', 'CODE_MISMATCH', 'INVALID_CODE_FORMAT', 'INVALID_BODY'])

/** A sign-up waiting for its code: the address it was started for, in the session that started it. */
interface PendingSignup { email: string, session: string, expiresAtMs: number }

/** As long as the service keeps a code (OTP_TTL_SECONDS, 10 minutes by default). */
const PENDING_FOR_MS = 10 * 60_000
/**
 * Bounds the memory strangers can fill; the oldest pending sign-up goes first. The service's
 * per-source limits (End-User-IP) already cap how fast one person can start sign-ups.
 */
const MAX_PENDING = 10_000
const SESSION_COOKIE = 'signup_session'

/** The browser's sign-up session, from its cookie; a new one when it has none. */
function sessionOf (request: FastifyRequest): { id: string, isNew: boolean } {
  const cookie = (request.headers.cookie ?? '').split(/;\s*/).find((part) => part.startsWith(`${SESSION_COOKIE}=`))
  const id = cookie?.slice(SESSION_COOKIE.length + 1) ?? ''
  return /^[A-Za-z0-9_-]{43}$/.test(id) ? { id, isNew: false } : { id: randomBytes(32).toString('base64url'), isNew: true }
}

export function buildExample (otp: EmailOtpClient): FastifyInstance {
  // requestId → the sign-up it belongs to. In your own project: your session store or database.
  const pending = new Map<string, PendingSignup>()

  // Behind your own proxies, set `trustProxy` to their addresses so that request.ip is the
  // end user's address and not the proxy's.
  const app = Fastify({ logger: true })

  app.post<{ Body: { email: string } }>('/signup/start', {
    schema: { body: { type: 'object', required: ['email'], additionalProperties: false, properties: { email: { type: 'string', minLength: 1, maxLength: 320 } } } }
  }, async (request, reply) => {
    const session = sessionOf(request)
    // End-User-IP: the service applies its block lists and per-source limits to this user,
    // not to this backend, which calls for everyone.
    const { requestId } = await otp.dispatch(request.body.email, { endUserIp: request.ip })
    // The address is kept here, never taken back from the page: a code proves the mailbox it
    // was sent to, and only the session that asked for it may use it.
    const now = Date.now()
    // Oldest first: every entry lives as long, so the expired ones lead.
    for (const [id, signup] of pending) {
      if (signup.expiresAtMs > now && pending.size < MAX_PENDING) break
      pending.delete(id)
    }
    pending.set(requestId, { email: request.body.email, session: session.id, expiresAtMs: now + PENDING_FOR_MS })
    if (session.isNew) void reply.header('set-cookie', `${SESSION_COOKIE}=${session.id}; Path=/signup; HttpOnly; SameSite=Strict${request.protocol === 'https' ? '; Secure' : ''}`)
    return { requestId }
  })

  app.post<{ Body: { requestId: string, code: string } }>('/signup/finish', {
    schema: { body: { type: 'object', required: ['requestId', 'code'], additionalProperties: false, properties: { requestId: { type: 'string', minLength: 1, maxLength: 64 }, code: { type: 'string', minLength: 1, maxLength: 64 } } } }
  }, async (request, reply) => {
    const signup = pending.get(request.body.requestId)
    if (signup === undefined || signup.session !== sessionOf(request).id || signup.expiresAtMs <= Date.now()) {
      return await reply.status(400).send({ error: 'UNKNOWN_SIGNUP', message: 'This sign-up was not started here or has expired; start again' })
    }
    try {
      await otp.verify(request.body.requestId, request.body.code, { endUserIp: request.ip })
    } catch (error) {
      // Every verify uses the code up, right or wrong; only the service's own trouble leaves it.
      if (error instanceof EmailOtpError && USER_ERRORS.has(error.code)) pending.delete(request.body.requestId)
      throw error
    }
    pending.delete(request.body.requestId)
    // signup.email is proven: create the account or the session for it here.
    return { verified: true, email: signup.email }
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
  const app = buildExample(otp)
  // Ctrl-C or a stop signal closes the server, so that nothing is left listening.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => { void app.close() })
  await app.listen({ host: process.env.HOST ?? '127.0.0.1', port: Number(process.env.PORT ?? 3001) })
}
