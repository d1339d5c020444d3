import { domainToASCII } from 'node:url'
import emailAddresses from 'email-addresses'
import { mailboxOf } from './mailbox.js'

export interface ValidatedEmail {
  /** Where the mail goes: the local part as given, the domain in lower-case ASCII (punycode). */
  address: string
  /**
   * The mailbox the address reaches, for per-recipient limits and the lockout: case-folded,
   * `+tag` removed, and the provider's own rules applied (lib/recipients/mailbox.ts), so every
   * spelling of one mailbox is one key.
   */
  canonical: string
  /** ASCII domain, for domain policies (disposable lists, tenant deny lists). */
  domain: string
}

export type EmailRejection =
  | 'too_long'
  | 'control_character'
  | 'syntax'
  | 'display_name_or_group'
  | 'comment_or_whitespace'
  | 'quoted_local_part'
  | 'non_ascii_local_part'
  | 'local_part_too_long'
  | 'domain_literal'
  | 'invalid_domain'
  | 'encoded_word'
  | 'source_route'

export type EmailCheck = { ok: true, email: ValidatedEmail } | { ok: false, reason: EmailRejection }

const MAX_ADDRESS = 254
const MAX_LOCAL = 64
// RFC 5322 dot-atom: the only local-part form the policy keeps (no quoted strings).
const DOT_ATOM_LOCAL = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/
// C0 and C1 controls, DEL, and the Unicode line/paragraph separators.
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/

/**
 * A bare dot-atom addr-spec (`local@label.label`) with an ASCII local part and a domain of
 * ASCII or, as RFC 6532 allows, non-ASCII characters: what nearly every input is, an
 * internationalised domain included. For such a string RFC 5322 leaves nothing to interpret
 * (no quotes, comments, whitespace, display name or group), so the parser's answer is known
 * without running it: the local part before the @, the domain after.
 */
const PLAIN_ADDRESS = /^([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*)@((?:[A-Za-z0-9-]|[^\x00-\x7f])+(?:\.(?:[A-Za-z0-9-]|[^\x00-\x7f])+)*)$/

/**
 * Any dot-atom addr-spec, atext or (RFC 6532) non-ASCII on both sides. Past refusedShape,
 * the only syntax left is atoms, dots and one @, so the parser's answer is known for every
 * input: this split when the text is a dot-atom on each side, and "not an address" when a
 * side is empty or has a dot at its start, its end or twice in a row. The parser itself
 * (40 to 600 µs on such leftovers) is never needed; validateEmailWithParser keeps it as the
 * reference the tests hold this to.
 */
const DOT_ATOM_ADDRESS = /^((?:[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]|[^\x00-\x7f])+(?:\.(?:[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]|[^\x00-\x7f])+)*)@((?:[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]|[^\x00-\x7f])+(?:\.(?:[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]|[^\x00-\x7f])+)*)$/

/** The parser's answer for text that passed refusedShape, without running it. */
function parseDotAtom (cleaned: string): Parsed {
  const plain = PLAIN_ADDRESS.exec(cleaned) ?? DOT_ATOM_ADDRESS.exec(cleaned)
  return plain === null ? { ok: false, reason: 'syntax' } : { ok: true, local: plain[1] as string, domain: plain[2] as string }
}

/**
 * What the policy refuses anyway, found by scanning characters, before any parser runs: the
 * RFC 5322 parser backtracks on nested comments and quotes (a 1 KB address of them cost 180 ms
 * of event-loop time), and none of that syntax is ever accepted here. With these gone and the
 * length bounded, what reaches the parser is short and flat.
 */
function refusedShape (text: string): EmailRejection | null {
  if (text.includes('"')) return 'quoted_local_part'
  if (/[<>,;:]/.test(text)) return 'display_name_or_group'
  if (/[[\]]/.test(text)) return 'domain_literal'
  if (/[\s()]/.test(text)) return 'comment_or_whitespace'
  const at = text.indexOf('@')
  if (at <= 0 || at !== text.lastIndexOf('@') || text.includes('\\')) return 'syntax'
  const local = text.slice(0, at)
  if (local.length > MAX_LOCAL) return 'local_part_too_long'
  // Local parts that some mail system on the way may decode or route elsewhere than the
  // domain says: RFC 2047 encoded-words (=?utf-8?q?…?=), the percent hack
  // (victim%example.com@relay), UUCP bang paths (host!user@…) and X.400 or fax gateway forms
  // (/G=John/S=Smith/@gateway).
  if (local.includes('=?')) return 'encoded_word'
  if (/[%!]/.test(local) || local.startsWith('/')) return 'source_route'
  return null
}

type Parsed = { ok: true, local: string, domain: string } | { ok: false, reason: EmailRejection }

/** The address read by the RFC 5322 parser (with RFC 6532 for internationalised domains). */
function parseWithParser (cleaned: string): Parsed {
  const parsed = emailAddresses.parseOneAddress({ input: cleaned, rfc6532: true })
  if (parsed === null) return { ok: false, reason: 'syntax' }
  if (parsed.type !== 'mailbox' || parsed.name !== null) return { ok: false, reason: 'display_name_or_group' }
  if (parsed.parts.local.tokens.trimStart().startsWith('"')) return { ok: false, reason: 'quoted_local_part' }
  // The parser drops comments and folding whitespace from `address`; anything it dropped was
  // not a bare addr-spec, and comments are how `a@x.com(evil.com)` smuggles a second domain.
  if (parsed.address !== cleaned) return { ok: false, reason: 'comment_or_whitespace' }
  return { ok: true, local: parsed.local, domain: parsed.domain }
}

/**
 * Accepts an address only if RFC 5322 (with RFC 6532 for internationalised domains) reads it
 * as one bare mailbox, and the strict policy agrees: no display names,
 * groups, comments, quoted local parts or control characters; an ASCII local part that routes
 * nowhere else; a public-looking DNS domain, converted to punycode. Length and refused shapes
 * are checked first, by scanning characters, so no input costs more than a few times an
 * ordinary one.
 */
export function validateEmail (input: string): EmailCheck {
  return check(input, true)
}

/**
 * validateEmail with the RFC 5322 parser (`email-addresses`) reading every input that passed
 * the shape scan: the reference that knowing the parser's answer (parseDotAtom) must never
 * depart from, which test/lib/recipients/address.test.ts checks.
 */
export function validateEmailWithParser (input: string): EmailCheck {
  return check(input, false)
}

function check (input: string, shortcut: boolean): EmailCheck {
  // Cleanup: surrounding whitespace and Unicode normalisation, so look-alike encodings of
  // one address are one address.
  const cleaned = input.trim().normalize('NFC')
  // RFC 5321's 254 characters. An internationalised domain only grows on its way to
  // punycode, so no longer input can pass.
  if (cleaned.length > MAX_ADDRESS) return { ok: false, reason: 'too_long' }
  if (CONTROL.test(cleaned)) return { ok: false, reason: 'control_character' }
  const shape = refusedShape(cleaned)
  if (shape !== null) return { ok: false, reason: shape }

  const parsed = shortcut ? parseDotAtom(cleaned) : parseWithParser(cleaned)
  if (!parsed.ok) return parsed

  const { local, domain } = parsed
  if (!/^[\x21-\x7e]+$/.test(local)) return { ok: false, reason: 'non_ascii_local_part' }
  if (!DOT_ATOM_LOCAL.test(local)) return { ok: false, reason: 'syntax' }
  if (local.length > MAX_LOCAL) return { ok: false, reason: 'local_part_too_long' }
  if (domain.startsWith('[')) return { ok: false, reason: 'domain_literal' }

  const asciiDomain = domainToASCII(domain.toLowerCase())
  if (!isPublicDnsName(asciiDomain)) return { ok: false, reason: 'invalid_domain' }

  const address = `${local}@${asciiDomain}`
  if (address.length > MAX_ADDRESS) return { ok: false, reason: 'too_long' }
  return { ok: true, email: { address, canonical: mailboxOf(local, asciiDomain), domain: asciiDomain } }
}

function isPublicDnsName (domain: string): boolean {
  if (domain === '' || domain.length > 253) return false
  const labels = domain.split('.')
  if (labels.length < 2) return false
  // An all-numeric top-level label is an IP address, not a mail domain.
  if (/^[0-9]+$/.test(labels[labels.length - 1] ?? '')) return false
  return labels.every((label) => DNS_LABEL.test(label))
}

const rejectionMessages: Record<EmailRejection, string> = {
  too_long: 'email is longer than 254 characters',
  control_character: 'email contains control characters',
  syntax: 'email is not a valid address',
  display_name_or_group: 'email must be a bare address, without a display name or group',
  comment_or_whitespace: 'email must not contain comments or whitespace',
  quoted_local_part: 'email must not have a quoted local part',
  non_ascii_local_part: 'email must have an ASCII local part (before the @)',
  local_part_too_long: 'email local part is longer than 64 characters',
  domain_literal: 'email must use a domain name, not an IP address literal',
  invalid_domain: 'email domain is not a valid domain name',
  encoded_word: 'email must not contain an RFC 2047 encoded-word (=?…?=)',
  source_route: 'email local part must not route elsewhere (%, ! or a leading /)'
}

export function describeEmailRejection (reason: EmailRejection): string {
  return rejectionMessages[reason]
}
