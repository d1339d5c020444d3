import Negotiator from 'negotiator'

/** The languages the service's own wording is written in. */
export type Locale = 'en' | 'fr' | 'de' | 'es'

export const SUPPORTED_LOCALES: readonly Locale[] = Object.freeze(['en', 'fr', 'de', 'es'])

export const DEFAULT_LOCALE: Locale = 'en'

export function isBuiltinLocale (value: string): value is Locale {
  return (SUPPORTED_LOCALES as readonly string[]).includes(value)
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

/** The languages one tenant's mail can be written in, the one to use when nothing matches first. */
export interface LocaleChoice {
  available: readonly string[]
  fallback: string
}

const BUILTIN_CHOICE: LocaleChoice = { available: SUPPORTED_LOCALES, fallback: DEFAULT_LOCALE }

/**
 * negotiator ranks the entries (RFC 4647 lookup by prefix in both directions, q order, ties
 * to the earliest entry, `*` as the first available language). It reads whatever it is
 * given, so it is handed only entries that are well-formed: a q above 1 or with four
 * decimals, a range with an empty subtag or a control character is dropped here rather
 * than read generously.
 */
function wellFormedEntry (entry: string): string | undefined {
  const [rawRange = '', ...params] = entry.split(';')
  const range = rawRange.trim().toLowerCase()
  if (!LANGUAGE_RANGE.test(range)) return undefined
  let quality = '1'
  for (const param of params) {
    const separator = param.indexOf('=')
    if (separator === -1) return undefined
    if (param.slice(0, separator).trim().toLowerCase() !== 'q') continue
    quality = param.slice(separator + 1).trim()
    if (!QVALUE.test(quality)) return undefined
  }
  return `${range};q=${quality}`
}

function bestOf (header: string, choice: LocaleChoice): string | undefined {
  if (header === '') return undefined
  return new Negotiator({ headers: { 'accept-language': header } }).language([choice.fallback, ...choice.available.filter((locale) => locale !== choice.fallback)])
}

function fromExplicit (explicit: string | undefined, choice: LocaleChoice): string | undefined {
  if (explicit === undefined || explicit.length > MAX_EXPLICIT_LENGTH) return undefined
  // Accept the POSIX spelling (fr_CA) too: it is what people paste from their system settings.
  const range = explicit.trim().toLowerCase().replaceAll('_', '-')
  if (range === '*' || !LANGUAGE_RANGE.test(range)) return undefined
  return bestOf(range, choice)
}

function fromAcceptLanguage (header: string | undefined, choice: LocaleChoice): string | undefined {
  if (header === undefined) return undefined
  const entries = header.slice(0, MAX_ACCEPT_LANGUAGE_LENGTH).split(',', MAX_ACCEPT_LANGUAGE_ENTRIES)
  return bestOf(entries.map(wellFormedEntry).filter((entry) => entry !== undefined).join(','), choice)
}

/** The language an explicit request (`fr`, `fr-CA`, `FR_ca`…) names among `choice.available`, if any. */
export function matchLocale (explicit: string, choice: LocaleChoice = BUILTIN_CHOICE): string | undefined {
  return fromExplicit(explicit, choice)
}

/**
 * Chooses the language of the mail among `choice.available` (the built-in languages unless a
 * tenant has its own): the explicit value from the request body when it matches one (fr,
 * fr-CA, FR_ca …), else the best match of Accept-Language, else `choice.fallback`.
 */
export function negotiateLocale (explicit: string | undefined, acceptLanguage: string | undefined, choice: LocaleChoice = BUILTIN_CHOICE): string {
  return fromExplicit(explicit, choice) ?? fromAcceptLanguage(acceptLanguage, choice) ?? choice.fallback
}
