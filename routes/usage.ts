import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { UsageReply } from '../schemas/usage.js'
import { apiError } from '../lib/errors.js'
import { commonErrors, errorResponses } from '../schemas/errors.js'
import { ref } from '../schemas/ref.js'

const usageRoutes: FastifyPluginAsyncTypebox = async function usageRoutes (fastify) {
  fastify.get('/usage', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'getUsage',
      summary: "The tenant's billing tier and its live and sandbox allowance in the current window",
      description: 'Secret keys only (a restricted key gets 403 KEY_NOT_PERMITTED). Sandbox dispatches count against the separate sandbox allowance, never the live one.',
      tags: ['account'],
      security: [{ bearerAuth: [] }],
      response: {
        200: ref(UsageReply, { description: 'The tier, and for live and sandbox traffic the allowance, what was charged and when the window ends.' }),
        ...errorResponses([...commonErrors, 'KEY_NOT_PERMITTED'])
      }
    }
  }, async function usage (request) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    return { success: true as const, data: await fastify.usage.report(key.tenant, Date.now()) }
  })
}

export default usageRoutes
