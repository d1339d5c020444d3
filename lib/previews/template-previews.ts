import { apiError } from '../errors.js'
import type { Tenant } from '../tenants/tenant.js'
import { TenantTimeShare } from '../fairness/time-share.js'
import { previewVerificationParts } from '../mail/templating/message.js'
import type { Part } from '../mail/templating/liquid.js'
import type { TemplateFallback } from '../mail/templating/tenant-templates.js'

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

export interface PreviewRequest {
  /** The language asked for; the tenant's default when absent. */
  locale?: string
  code?: string
  /** The lifetime the message states; the tenant's (else the service's) when absent. */
  minutes?: number
}

export interface Preview {
  locale: string
  subject: string
  text: string
  html: string
  /** The parts the tenant wrote for this language. */
  customParts: Part[]
}

export interface PreviewHooks {
  /**
   * The host's own limits, checked once the tenant's turn is taken and before anything is
   * rendered; its rejection is the answer (the turn is given back).
   */
  admit: () => Promise<void>
  onTemplateFallback: (fallback: TemplateFallback) => void
}

/**
 * The tenant's verification message rendered with a sample code, as dispatch would send it,
 * nothing sent, stored or charged. Previews of one tenant take turns within a share of this
 * process's time (lib/mail/templating/liquid-bounds.ts bounds each part's render).
 */
export class TemplatePreviews {
  readonly #rendering = new TenantTimeShare(PREVIEW_TIME_SHARE, PREVIEW_BURST_MS)
  readonly #defaultTtlSeconds: number

  constructor (defaultTtlSeconds: number) {
    this.#defaultTtlSeconds = defaultTtlSeconds
  }

  async render (tenant: Tenant, request: PreviewRequest, hooks: PreviewHooks): Promise<Preview> {
    const { templates } = tenant
    const locale = request.locale === undefined ? templates.defaultLocale : templates.match(request.locale)
    if (locale === undefined) {
      throw apiError('LOCALE_NOT_AVAILABLE', `The tenant has no message wording in ${request.locale ?? ''}; it has ${templates.locales.join(', ')}`)
    }
    const turn = this.#rendering.acquire(tenant.id)
    if (!('release' in turn)) {
      const seconds = String(Math.max(1, Math.ceil(turn.retryInMs / 1000)))
      throw apiError('RATE_LIMITED', turn.retryInMs === 0 ? 'Another preview of this tenant is being rendered; retry once it is done' : `This tenant's previews used their share of the service's time; retry in ${seconds} s`, { 'retry-after': seconds })
    }
    let tookMs = 0
    try {
      await hooks.admit()
      const parts = await previewVerificationParts({
        templates,
        locale,
        brand: tenant.brandName,
        code: request.code ?? SAMPLE_CODE,
        ttlSeconds: request.minutes === undefined ? tenant.ttlSeconds ?? this.#defaultTtlSeconds : request.minutes * 60,
        onTemplateFallback: hooks.onTemplateFallback
      })
      tookMs = parts.renderMs
      return { locale: parts.locale, subject: parts.subject, text: parts.text, html: parts.html, customParts: templates.customParts(parts.locale) }
    } finally {
      turn.release(tookMs)
    }
  }
}
