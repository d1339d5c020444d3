import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { VerificationReply } from '../schemas/verifications.js'
import { REQUEST_ID_PATTERN } from '../schemas/patterns.js'
import { apiError } from '../lib/errors.js'
import { commonErrors, errorResponses } from '../schemas/errors.js'
import { ref } from '../schemas/ref.js'

const requestIdShape = new RegExp(REQUEST_ID_PATTERN)

const verificationRoutes: FastifyPluginAsyncTypebox = async function verificationRoutes (fastify) {
  fastify.get('/verifications/:requestId', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'getVerification',
      summary: 'The story of one verification: its state and what happened to it, when',
      description: "Secret keys only (a restricted key gets 403 KEY_NOT_PERMITTED), of the tenant and mode that dispatched it. Never the address, the code or a guess. Kept VERIFICATION_LOG_DAYS after the dispatch. A requestId that is unknown, past that, forgotten for the tenant's cap, malformed, another tenant's or of the other mode answers one and the same 404 NOT_FOUND.",
      tags: ['account'],
      security: [{ bearerAuth: [] }],
      // Not validated by pattern: a malformed requestId answers the 404 of an unknown one.
      params: Type.Object({ requestId: Type.String() }),
      response: {
        200: ref(VerificationReply, { description: 'The verification\'s state and its events in order.' }),
        ...errorResponses([...commonErrors, 'KEY_NOT_PERMITTED', 'NOT_FOUND'])
      }
    }
  }, async function verification (request) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    const { requestId } = request.params
    const story = requestIdShape.test(requestId) ? await fastify.verifications.story(key.tenant.id, key.mode, requestId) : null
    if (story === null) throw apiError('NOT_FOUND')
    return { success: true as const, data: story }
  })

  // A requestId longer than the router matches as a parameter gets the same key checks and
  // the same 404 as any other unknown one, not the 404 of a route that does not exist.
  fastify.get('/verifications/*', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: { hide: true }
  }, async function tooLong () {
    throw apiError('NOT_FOUND')
  })
}

export default verificationRoutes
