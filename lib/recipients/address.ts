import { domainToASCII } from 'node:url'
import emailAddresses from 'email-addresses'

export interface ValidatedEmail {
  /** Where the mail goes: the local part as given, the domain in lower-case ASCII (punycode). */
  address: string
  /** The key for per-recipient limits: case-folded, `+tag` removed. */
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

export type EmailCheck = { ok: true, email: ValidatedEmail } | { ok: false, reason: EmailRejection }

const MAX_ADDRESS = 254
const MAX_LOCAL = 64
// RFC 5322 dot-atom: the only local-part form the policy keeps (no quoted strings).
const DOT_ATOM_LOCAL = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/
// C0 and C1 controls, DEL, and the Unicode line/paragraph separators.
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/

/**
 * A bare dot-atom addr-spec of printable ASCII (`local@label.label`): what nearly every input
 * is. For such a string RFC 5322 leaves nothing to interpret (no quotes, comments, whitespace,
 * display name or group), so the parser's answer is known without running it: the local part
 * before the @, the domain after. Anything else goes through the parser.
 */
const PLAIN_ADDRESS = /^([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*)@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)$/

/**
 * Every mailbox holds an @ and every group a colon: text with neither is no address, which
 * the parser (slowest on what it cannot read: 75 µs for "nope") would only confirm.
 */
function cannotBeAnAddress (text: string): boolean {
  return !text.includes('@') && !text.includes(':')
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
 * Accepts an address only if the RFC 5322 parser (with RFC 6532 for internationalised
 * domains) reads it as one bare mailbox, and the strict policy agrees: no display names,
 * groups, comments, quoted local parts or control characters; an ASCII local part; a
 * public-looking DNS domain, converted to punycode.
 */
export function validateEmail (input: string): EmailCheck {
  return check(input, true)
}

/**
 * validateEmail without the shortcut for plain addresses: every input through the parser.
 * The shortcut must never change an answer, which test/email.test.ts checks against this.
 */
export function validateEmailWithParser (input: string): EmailCheck {
  return check(input, false)
}

function check (input: string, shortcut: boolean): EmailCheck {
  // Cleanup: surrounding whitespace and Unicode normalisation, so look-alike encodings of
  // one address are one address.
  const cleaned = input.trim().normalize('NFC')
  if (cleaned.length > MAX_ADDRESS * 4) return { ok: false, reason: 'too_long' }
  if (CONTROL.test(cleaned)) return { ok: false, reason: 'control_character' }

  if (shortcut && cannotBeAnAddress(cleaned)) return { ok: false, reason: 'syntax' }
  const plain = shortcut ? PLAIN_ADDRESS.exec(cleaned) : null
  const parsed: Parsed = plain === null ? parseWithParser(cleaned) : { ok: true, local: plain[1] as string, domain: plain[2] as string }
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
  const plus = local.indexOf('+')
  const canonicalLocal = (plus > 0 ? local.slice(0, plus) : local).toLowerCase()
  return { ok: true, email: { address, canonical: `${canonicalLocal}@${asciiDomain}`, domain: asciiDomain } }
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
  invalid_domain: 'email domain is not a valid domain name'
}

export function describeEmailRejection (reason: EmailRejection): string {
  return rejectionMessages[reason]
}
