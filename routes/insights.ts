import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { InsightsQuery, InsightsReply } from '../schemas/insights.js'
import { apiError } from '../lib/errors.js'
import { commonErrors, errorResponses, inputErrors } from '../schemas/errors.js'
import { ref } from '../schemas/ref.js'

const insightsRoutes: FastifyPluginAsyncTypebox = async function insightsRoutes (fastify) {
  fastify.get('/insights', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'getInsights',
      summary: "The tenant's funnel per hour or day: requested, sent, delivered, verified, refused…",
      description: "Secret keys only (a restricted key gets 403 KEY_NOT_PERMITTED), of the key's tenant and mode. A verification counts in the bucket of the hour or day it was requested in, so `conversion` (verified ÷ sent) is at most 1 in every bucket; refusals count in the hour they were answered. Kept INSIGHTS_DAYS; counts reach the answer within about a second. Times to verify and to delivery are estimated from fixed histogram bins. A range that is not RFC 3339, ends before it starts, ends before the oldest data kept or further ahead than INSIGHTS_DAYS answers 400 INSIGHTS_RANGE_INVALID; more than 168 hours or 400 days, 400 INSIGHTS_RANGE_TOO_LONG.",
      tags: ['account'],
      security: [{ bearerAuth: [] }],
      querystring: InsightsQuery,
      response: {
        200: ref(InsightsReply, { description: 'Every bucket of the range, zeros included, and the totals.' }),
        ...errorResponses([...commonErrors, ...inputErrors, 'KEY_NOT_PERMITTED', 'INSIGHTS_RANGE_INVALID', 'INSIGHTS_RANGE_TOO_LONG'])
      }
    }
  }, async function insights (request) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    return { success: true as const, data: await fastify.insights.report(key.tenant.id, key.mode, request.query) }
  })
}

export default insightsRoutes
