import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { apiError } from '../lib/errors.js'
import { previewVerificationParts } from '../lib/mail/compose.js'
import { TenantTimeShare } from '../lib/tenants/time-share.js'
import { bodyErrors, commonErrors, errorResponses } from '../schemas/errors.js'
import { ref } from '../schemas/ref.js'
import { TemplatePreviewBody, TemplatePreviewReply } from '../schemas/templates.js'

/** The code a preview shows when the request names none. */
const SAMPLE_CODE = '123456'
/**
 * The share of the preview thread's time one tenant's previews may take (one at a time, each
 * charged the CPU time its parts took), after a burst of PREVIEW_BURST_MS: a tenant cannot keep
 * the thread from other tenants' previews, however many keys it uses and whatever
 * RATE_LIMIT_PREVIEW allows.
 */
const PREVIEW_TIME_SHARE = 0.25
const PREVIEW_BURST_MS = 50

const templateRoutes: FastifyPluginAsyncTypebox = async function templateRoutes (fastify) {
  // A tenant can mint many keys: its previews are counted per tenant too, across instances
  // when the limits live in Redis, and take turns per instance within a share of its time
  // (lib/mail/liquid-bounds.ts bounds each part's render; see the README's "Security model").
  const { preview: previewLimit } = fastify.config.routeLimits
  const previewsOfTenant = fastify.createRateLimit({
    max: previewLimit.max,
    timeWindow: previewLimit.windowMs,
    keyGenerator: (request) => `preview:${request.auth?.tenant.id ?? request.clientAddress}`
  })
  const rendering = new TenantTimeShare(PREVIEW_TIME_SHARE, PREVIEW_BURST_MS)

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
    const { templates } = tenant
    const locale = request.body.locale === undefined ? templates.defaultLocale : templates.match(request.body.locale)
    if (locale === undefined) {
      throw apiError('LOCALE_NOT_AVAILABLE', `The tenant has no message wording in ${request.body.locale ?? ''}; it has ${templates.locales.join(', ')}`)
    }
    const turn = rendering.acquire(tenant.id)
    if (!('release' in turn)) {
      const seconds = String(Math.max(1, Math.ceil(turn.retryInMs / 1000)))
      throw apiError('RATE_LIMITED', turn.retryInMs === 0 ? 'Another preview of this tenant is being rendered; retry once it is done' : `This tenant's previews used their share of the service's time; retry in ${seconds} s`, { 'retry-after': seconds })
    }
    let tookMs = 0
    try {
      const limit = await previewsOfTenant(request)
      if (!limit.isAllowed && limit.isExceeded) {
        const seconds = String(Math.max(1, limit.ttlInSeconds))
        throw apiError('RATE_LIMITED', `Too many previews for this tenant; retry in ${seconds} s`, { 'retry-after': seconds })
      }
      const parts = await previewVerificationParts({
        templates,
        locale,
        brand: tenant.brandName,
        code: request.body.code ?? SAMPLE_CODE,
        ttlSeconds: request.body.minutes === undefined ? tenant.ttlSeconds ?? fastify.config.otpTtlSeconds : request.body.minutes * 60,
        onTemplateFallback: (fallback) => {
          request.log.warn({ tenant: tenant.id, locale: fallback.locale, part: fallback.part, rule: fallback.rule }, 'template broke a rule for this message; rendered the built-in wording')
        }
      })
      tookMs = parts.renderMs
      return {
        success: true as const,
        message: 'Message rendered; nothing was sent',
        data: { locale: parts.locale, subject: parts.subject, text: parts.text, html: parts.html, customParts: templates.customParts(parts.locale) }
      }
    } finally {
      turn.release(tookMs)
    }
  })
}

export default templateRoutes
