import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { UsageReply } from '../schemas/usage.js'
import { apiError } from '../lib/errors.js'
import { usageReport } from '../lib/quota/allowance.js'
import { storeCall } from '../lib/store-errors.js'
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
    const now = Date.now()
    const [live, sandbox] = await storeCall('quota', async () => await Promise.all([
      usageReport(fastify.backend.quota, key.tenant, 'live', now),
      usageReport(fastify.backend.quota, key.tenant, 'test', now)
    ]))
    return { success: true as const, data: { tenant: key.tenant.id, tier: key.tenant.tier.name, live, sandbox } }
  })
}

export default usageRoutes
