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
