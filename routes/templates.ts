import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { apiError } from '../lib/errors.js'
import { bodyErrors, commonErrors, errorResponses } from '../schemas/errors.js'
import { ref } from '../schemas/ref.js'
import { TemplatePreviewBody, TemplatePreviewReply } from '../schemas/templates.js'

const templateRoutes: FastifyPluginAsyncTypebox = async function templateRoutes (fastify) {
  // A tenant can mint many keys: its previews are counted per tenant too, across instances
  // when the limits live in Redis, and take turns per instance within a share of its time
  // (lib/previews/template-previews.ts; lib/mail/templating/liquid-bounds.ts bounds each part's render; see the
  // README's "Security model").
  const { preview: previewLimit } = fastify.config.routeLimits
  const previewsOfTenant = fastify.createRateLimit({
    max: previewLimit.max,
    timeWindow: previewLimit.windowMs,
    keyGenerator: (request) => `preview:${request.auth?.tenant.id ?? request.clientAddress}`
  })

  fastify.post('/templates/preview', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'previewTemplate',
      summary: 'Render the tenant\'s verification message with a sample code',
      description: 'What the tenant\'s users get in one language, rendered exactly as dispatch renders it (the tenant\'s own templates from the tenants file, the service\'s wording for the parts it does not write), with a sample code: nothing is sent, stored or charged. Secret keys only (a restricted key gets 403 `KEY_NOT_PERMITTED`), live or sandbox. Each part is rendered afresh within its render budget (a part that breaks a rule shows the built-in wording, as dispatch would send it). Limited per key (`RATE_LIMIT_ACCOUNT`) and per tenant, all its keys together (`RATE_LIMIT_PREVIEW`, and one preview of a tenant at a time per instance): 429 `RATE_LIMITED` with `Retry-After`.',
      tags: ['templates'],
      security: [{ bearerAuth: [] }],
      body: ref(TemplatePreviewBody),
      response: {
        200: ref(TemplatePreviewReply, { description: 'The subject, text and HTML parts as dispatch would send them.' }),
        // Nothing here needs the store (its per-key limit lets requests through when Redis is down): never 503.
        ...errorResponses([...commonErrors.filter((code) => code !== 'UNAVAILABLE'), ...bodyErrors, 'LOCALE_NOT_AVAILABLE', 'KEY_NOT_PERMITTED'])
      }
    }
  }, async function previewTemplate (request) {
    const key = request.auth
    if (key === null) throw apiError('UNAUTHORIZED')
    const { tenant } = key
    const preview = await fastify.previews.render(tenant, request.body, {
      async admit () {
        const limit = await previewsOfTenant(request)
        if (!limit.isAllowed && limit.isExceeded) {
          const seconds = String(Math.max(1, limit.ttlInSeconds))
          throw apiError('RATE_LIMITED', `Too many previews for this tenant; retry in ${seconds} s`, { 'retry-after': seconds })
        }
      },
      onTemplateFallback (fallback) {
        request.log.warn({ tenant: tenant.id, locale: fallback.locale, part: fallback.part, rule: fallback.rule }, 'template broke a rule for this message; rendered the built-in wording')
      }
    })
    return { success: true as const, message: 'Message rendered; nothing was sent', data: preview }
  })
}

export default templateRoutes
