import type { OutgoingMessage } from './transport.js'
import type { Locale } from './locale.js'
import { TEMPLATES, renderHtml, renderText } from './templates.js'

const HTML_ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;'
}

/** Escapes text for use in HTML element content and in quoted attribute values. */
export function escapeHtml (value: string): string {
  return value.replace(/[&<>"']/g, (char) => HTML_ESCAPES[char] ?? char)
}

/**
 * C0/C1 controls (CR and LF among them, which could start a new header line), the Unicode
 * line and paragraph separators, and the bidirectional overrides that let a brand display as
 * something other than what it is.
 */
const UNSAFE_IN_LINE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]+/g
const CONTROL = /[\u0000-\u001f\u007f]/

/** Makes a tenant-supplied label safe to place in a header: one line, no control characters. */
function singleLine (value: string): string {
  return value.replace(UNSAFE_IN_LINE, ' ').replace(/\s+/g, ' ').trim()
}

/**
 * Addresses were validated upstream; this only guarantees the "header-safe" promise of
 * OutgoingMessage. The value is left out of the error so it cannot reach a log.
 */
function assertHeaderSafe (field: string, value: string): void {
  if (CONTROL.test(value)) throw new TypeError(`${field} contains control characters`)
}

export interface VerificationMessageInput {
  to: string
  from: string
  replyTo?: string
  /** Tenant-supplied display name; rendered as text, never as markup or a header line. */
  brand: string
  code: string
  ttlSeconds: number
  locale: Locale
  tags: Record<string, string>
}

/** Renders the verification mail. The code appears in the bodies only, never in the subject. */
export function composeVerificationMessage (input: VerificationMessageInput): OutgoingMessage {
  assertHeaderSafe('to', input.to)
  assertHeaderSafe('from', input.from)
  if (input.replyTo !== undefined) assertHeaderSafe('replyTo', input.replyTo)
  if (!Number.isFinite(input.ttlSeconds) || input.ttlSeconds <= 0) {
    throw new RangeError('ttlSeconds must be a positive number')
  }
  const brand = singleLine(input.brand)
  if (brand === '') throw new TypeError('brand is empty')

  // Rounded down so the mail never promises more time than the code really has.
  const minutes = Math.max(1, Math.floor(input.ttlSeconds / 60))
  const template = TEMPLATES[input.locale]
  const subject = template.subject(brand)

  const message: OutgoingMessage = {
    to: input.to,
    from: input.from,
    subject,
    text: renderText(template, brand, input.code, minutes),
    html: renderHtml({
      lang: escapeHtml(template.lang),
      title: escapeHtml(subject),
      codeIntro: escapeHtml(template.codeIntro(brand)),
      code: escapeHtml(input.code),
      expiry: escapeHtml(template.expiry(minutes)),
      ignore: escapeHtml(template.ignore)
    }),
    tags: { ...input.tags }
  }
  if (input.replyTo !== undefined) message.replyTo = input.replyTo
  return message
}
