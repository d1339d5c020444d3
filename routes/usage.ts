import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { apiError } from '../lib/errors.js'
import { commonErrors, errorResponses } from '../schemas/errors.js'

const Allowance = Type.Object({
  limit: Type.Integer({ description: 'Dispatches allowed per window.' }),
  used: Type.Integer({ description: 'Dispatches charged in the current window (failed deliveries are not charged).' }),
  remaining: Type.Integer(),
  window: Type.String({ description: 'Window length (`1h`, `1d`, `30d`…) or `month` (calendar month, UTC).' }),
  resetsAt: Type.String({ format: 'date-time', description: 'When the current window ends and the allowance returns.' })
})

const UsageReply = Type.Object({
  success: Type.Literal(true),
  data: Type.Object({
    tenant: Type.String(),
    tier: Type.String(),
    live: Allowance,
    sandbox: Allowance
  })
})

const usageRoutes: FastifyPluginAsyncTypebox = async function usageRoutes (fastify) {
  fastify.get('/usage', {
    config: { keyKinds: ['secret'] },
    schema: {
      operationId: 'getUsage',
      summary: "The tenant's billing tier and its live and sandbox allowance in the current window",
      description: 'Secret keys only (a restricted key gets 403 KEY_NOT_PERMITTED). Sandbox dispatches count against the separate sandbox allowance, never the live one.',
      tags: ['account'],
      security: [{ bearerAuth: [] }],
      response: { 200: UsageReply, ...errorResponses([...commonErrors, 'KEY_NOT_PERMITTED']) }
    }
  }, async function usage (request) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    const [live, sandbox] = await Promise.all([fastify.quota.usage(key.tenant, 'live'), fastify.quota.usage(key.tenant, 'test')])
    return { success: true as const, data: { tenant: key.tenant.id, tier: key.tenant.tier.name, live, sandbox } }
  })
}

export default usageRoutes
