import type { FastifyError } from 'fastify'
import fp from 'fastify-plugin'
import type { ErrorCode } from '../schemas/error-catalog.js'
import { isRefusalStatus } from '../lib/state/insights.js'
import { toApiError } from './errors.js'
import { callerOf } from './services.js'

/** Answers that come out of the admission step, which has counted the request already. */
const COUNTED_BY_ADMISSION: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'RATE_LIMITED', 'QUOTA_EXCEEDED', 'CODE_MISMATCH', 'INVALID_CODE_FORMAT', 'DELIVERY_FAILED'
])

/**
 * Every authenticated request of the scope counts against the caller's velocity limits, refused
 * or not: a request turned away before admission (a malformed body, a bad or disposable
 * address, an idempotency conflict…) is counted here, and answers 429 once the caller is past
 * a limit. Without it one source could send refused requests without end. The error then goes
 * on to the root error handler, which renders it.
 *
 * Every 402, 403 and 429 answered to a key the auth hook identified is also counted in its
 * tenant's insights (GET /insights), in process: the store writes its tallies about once a
 * second, off the request path. A caller with no valid key is nobody's to count.
 */
export default fp(async function refusalsPlugin (fastify) {
  // Synchronous when there is nothing to count (a 401, a refusal admission counted): an async
  // handler costs every refusal a promise and a turn of the microtask queue.
  fastify.setErrorHandler(function countRefusal (error: FastifyError, request, reply): Promise<never> | undefined {
    const refusal = toApiError(error)
    if (request.auth === null || refusal.statusCode < 400 || refusal.statusCode >= 500 || refusal.counted === true || COUNTED_BY_ADMISSION.has(refusal.code)) {
      // What a throw would do (Fastify sends the error on to the root handler), without the
      // cost of throwing: a few microseconds of every 401 and 403.
      reply.send(error)
      return undefined
    }
    return fastify.otp.countRefused(callerOf(request), refusal).then((counted) => { throw counted })
  })
  fastify.addHook('onResponse', function countInInsights (request, reply, done) {
    const key = request.auth
    const status = reply.statusCode
    if (key !== null && isRefusalStatus(status)) fastify.state.insights.refused(key.tenant.id, key.mode, status, Date.now())
    done()
  })
}, { name: 'refusals', dependencies: ['services', 'errors'], fastify: '5.x' })
