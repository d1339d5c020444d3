import type { OutgoingMessage } from '../delivery/transport.js'
import { singleLine } from './liquid.js'
import { TenantTemplates, requestTime, type RenderedMessage, type RenderInput, type TemplateFallback } from './tenant-templates.js'

export { escapeHtml } from './templates.js'

const CONTROL = /[\u0000-\u001f\u007f]/

/**
 * Addresses were validated upstream; this only guarantees the "header-safe" promise of
 * OutgoingMessage. The value is left out of the error so it cannot reach a log.
 */
function assertHeaderSafe (field: string, value: string): void {
  if (CONTROL.test(value)) throw new TypeError(`${field} contains control characters`)
}

/** What the wording of a verification mail depends on. */
export interface VerificationPartsInput {
  /** Tenant-supplied display name; rendered as text, never as markup or a header line. */
  brand: string
  code: string
  ttlSeconds: number
  /** One of `templates.locales` (negotiated by `templates.negotiate`). */
  locale: string
  /** The tenant's wording; the service's built-in wording when absent. */
  templates?: TenantTemplates
  /** When the code was asked for (templates see it to the minute); now when absent. */
  requestedAt?: Date
  /** Told when a tenant's template broke a rule for this message and the built-in wording went out instead. */
  onTemplateFallback?: (fallback: TemplateFallback) => void
}

export interface VerificationMessageInput extends VerificationPartsInput {
  to: string
  from: string
  replyTo?: string
  tags: Record<string, string>
}

/**
 * The subject, text and HTML of the verification mail, as dispatch sends it. The code appears
 * in the bodies only, never in the subject; the subject is one line with no control
 * characters, whatever the template or the brand.
 */
export function renderVerificationParts (input: VerificationPartsInput): RenderedMessage {
  const { templates, render } = renderInput(input)
  const { fallback, pieces, ...rendered } = templates.render(input.locale, render)
  if (fallback !== null) input.onTemplateFallback?.(fallback)
  return rendered
}

/**
 * The same parts for a preview: rendered afresh in the preview thread (TenantTemplates.preview),
 * never touching what dispatches reuse; `renderMs` is the CPU time the tenant's parts took.
 */
export async function previewVerificationParts (input: VerificationPartsInput): Promise<RenderedMessage & { renderMs: number }> {
  const { templates, render } = renderInput(input)
  const { fallback, ...rendered } = await templates.preview(input.locale, render)
  if (fallback !== null) input.onTemplateFallback?.(fallback)
  return rendered
}

function renderInput (input: VerificationPartsInput): { templates: TenantTemplates, render: RenderInput } {
  if (!Number.isFinite(input.ttlSeconds) || input.ttlSeconds <= 0) {
    throw new RangeError('ttlSeconds must be a positive number')
  }
  const brand = singleLine(input.brand)
  if (brand === '') throw new TypeError('brand is empty')
  return {
    templates: input.templates ?? TenantTemplates.builtin,
    render: {
      brand,
      code: input.code,
      // Rounded down so the mail never promises more time than the code really has.
      minutes: Math.max(1, Math.floor(input.ttlSeconds / 60)),
      requestedAt: requestTime(input.requestedAt ?? new Date())
    }
  }
}

/** The verification mail, addressed: the parts of renderVerificationParts between header-safe addresses. */
export function composeVerificationMessage (input: VerificationMessageInput): OutgoingMessage {
  assertHeaderSafe('to', input.to)
  assertHeaderSafe('from', input.from)
  if (input.replyTo !== undefined) assertHeaderSafe('replyTo', input.replyTo)
  const { templates, render } = renderInput(input)
  const { fallback, ...rendered } = templates.render(input.locale, render)
  if (fallback !== null) input.onTemplateFallback?.(fallback)
  const message: OutgoingMessage = {
    to: input.to,
    from: input.from,
    subject: rendered.subject,
    text: rendered.text,
    html: rendered.html,
    tags: { ...input.tags },
    pieces: rendered.pieces
  }
  if (input.replyTo !== undefined) message.replyTo = input.replyTo
  return message
}
