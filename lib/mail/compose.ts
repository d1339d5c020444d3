import type { OutgoingMessage } from './transport.js'
import { TEMPLATES, renderHtml, renderText } from './templates.js'

export type Locale = 'en' | 'fr' | 'de' | 'es'

export const SUPPORTED_LOCALES: readonly Locale[] = Object.freeze(['en', 'fr', 'de', 'es'])

const DEFAULT_LOCALE: Locale = 'en'

function isLocale (value: string | undefined): value is Locale {
  return value !== undefined && (SUPPORTED_LOCALES as readonly string[]).includes(value)
}

/** RFC 4647 basic language range: alphanumeric subtags of 1 to 8 characters, or '*'. */
const LANGUAGE_RANGE = /^(?:[a-z]{1,8}(?:-[a-z0-9]{1,8})*|\*)$/
/** RFC 9110 qvalue: at most three decimals, never above 1. */
const QVALUE = /^(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)$/

/**
 * The Accept-Language header is attacker-controlled and may be huge: only its beginning is
 * looked at, and only so many entries. Browsers send a handful; 32 is generous.
 */
const MAX_ACCEPT_LANGUAGE_LENGTH = 1024
const MAX_ACCEPT_LANGUAGE_ENTRIES = 32
/** Longest sensible explicit tag (RFC 5646 recommends supporting at least 35 characters). */
const MAX_EXPLICIT_LENGTH = 35

/** Maps a language range to a locale we have templates for, by its primary subtag. */
function localeOf (range: string): Locale | undefined {
  const primary = range.split('-', 1)[0]
  return isLocale(primary) ? primary : undefined
}

function fromExplicit (explicit: string | undefined): Locale | undefined {
  if (explicit === undefined || explicit.length > MAX_EXPLICIT_LENGTH) return undefined
  // Accept the POSIX spelling (fr_CA) too: it is what people paste from their system settings.
  const range = explicit.trim().toLowerCase().replaceAll('_', '-')
  if (range === '*' || !LANGUAGE_RANGE.test(range)) return undefined
  return localeOf(range)
}

/** Parses the q parameter of one entry; undefined when it is malformed. */
function qualityOf (params: string[]): number | undefined {
  let quality = 1
  for (const param of params) {
    const separator = param.indexOf('=')
    if (separator === -1) return undefined
    if (param.slice(0, separator).trim().toLowerCase() !== 'q') continue
    const value = param.slice(separator + 1).trim()
    if (!QVALUE.test(value)) return undefined
    quality = Number(value)
  }
  return quality
}

function fromAcceptLanguage (header: string | undefined): Locale | undefined {
  if (header === undefined) return undefined
  let best: Locale | undefined
  let bestQuality = 0
  const entries = header.slice(0, MAX_ACCEPT_LANGUAGE_LENGTH).split(',', MAX_ACCEPT_LANGUAGE_ENTRIES)
  for (const entry of entries) {
    const [rawRange = '', ...params] = entry.split(';')
    const range = rawRange.trim().toLowerCase()
    if (!LANGUAGE_RANGE.test(range)) continue
    const quality = qualityOf(params)
    // q=0 means "not acceptable"; a strict comparison keeps the earliest entry on ties.
    if (quality === undefined || quality <= bestQuality) continue
    // '*' is "any other language": the default is as good an answer as any.
    const locale = range === '*' ? DEFAULT_LOCALE : localeOf(range)
    if (locale === undefined) continue
    best = locale
    bestQuality = quality
  }
  return best
}

/**
 * Chooses the language of the mail: the explicit value from the request body when we support
 * it (fr, fr-CA, FR_ca …), else the best supported language of Accept-Language, else English.
 */
export function negotiateLocale (explicit: string | undefined, acceptLanguage: string | undefined): Locale {
  return fromExplicit(explicit) ?? fromAcceptLanguage(acceptLanguage) ?? DEFAULT_LOCALE
}

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
