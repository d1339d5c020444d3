/**
 * Which spellings of an address reach one mailbox, per mail provider, as the providers
 * document it. Recipient limits and the wrong-guess lockout count per mailbox, so an
 * attacker cannot multiply them by spelling one person's address many ways (a 10-letter
 * Gmail local part has 512 dot placements, times two domains, times any +tag).
 *
 * The table is data: add a provider by adding an entry. Only what a provider promises goes
 * in, because a wrong merge is harmful too: it would let one person's wrong guesses lock
 * another out.
 */
export interface MailboxRule {
  /** Who documents it, for whoever maintains the table. */
  provider: string
  /** Domains that reach the same mailboxes (the first is where they are counted). */
  domains: readonly string[]
  /** Characters the provider ignores in the local part. */
  ignored?: readonly string[]
  /** Characters the provider treats as another one (`-` and `.` at Yandex), to the one they stand for. */
  equivalent?: Readonly<Record<string, string>>
  /** `anything@user.fastmail.com` reaches `user@fastmail.com`. */
  subdomainAddressing?: boolean
}

/**
 * Every domain separates a sub-address with `+` (RFC 5233); this table adds what some
 * providers do besides.
 */
export const MAILBOX_RULES: readonly MailboxRule[] = [
  // "Gmail doesn't recognize dots as characters within usernames"; googlemail.com is the
  // same service under another name.
  { provider: 'Google Gmail', domains: ['gmail.com', 'googlemail.com'], ignored: ['.'] },
  // An account with a me.com or mac.com address has the same name at icloud.com.
  { provider: 'Apple iCloud', domains: ['icloud.com', 'me.com', 'mac.com'] },
  // Every account has its name at each Proton domain; Proton also ignores dots, hyphens and
  // underscores in it (confirmed by Proton support; not in its documentation).
  { provider: 'Proton Mail', domains: ['proton.me', 'protonmail.com', 'protonmail.ch', 'pm.me'], ignored: ['.', '-', '_'] },
  // "Each mailbox on Yandex Mail has aliases" in these domains; in a login a hyphen and a dot
  // are the same character.
  { provider: 'Yandex Mail', domains: ['yandex.ru', 'yandex.com', 'ya.ru', 'yandex.by', 'yandex.kz', 'yandex.ua'], equivalent: { '-': '.' } },
  // Subdomain addressing: mail to anything@user.fastmail.com goes to user@fastmail.com.
  { provider: 'Fastmail', domains: ['fastmail.com'], subdomainAddressing: true },
  { provider: 'Fastmail', domains: ['fastmail.fm'], subdomainAddressing: true }
]

interface CompiledRule {
  domain: string
  rule: MailboxRule
}

const byDomain = new Map<string, CompiledRule>()
for (const rule of MAILBOX_RULES) {
  const [home] = rule.domains
  if (home === undefined) continue
  for (const domain of rule.domains) byDomain.set(domain, { domain: home, rule })
}

/** The rule of a domain, also for `user.fastmail.com` with subdomain addressing (returns the user). */
function ruleFor (domain: string): { compiled: CompiledRule, subdomainUser: string | null } | null {
  const exact = byDomain.get(domain)
  if (exact !== undefined) return { compiled: exact, subdomainUser: null }
  const dot = domain.indexOf('.')
  const parent = byDomain.get(domain.slice(dot + 1))
  if (dot > 0 && parent?.rule.subdomainAddressing === true) return { compiled: parent, subdomainUser: domain.slice(0, dot) }
  return null
}

/**
 * The mailbox an address reaches: `local@domain` case-folded, its `+tag` removed, then the
 * provider's rule applied (`local` and `domain` as validated: an ASCII dot-atom and a
 * lower-case ASCII domain).
 */
export function mailboxOf (local: string, domain: string): string {
  const found = ruleFor(domain)
  let name = found?.subdomainUser ?? local.toLowerCase()
  const plus = name.indexOf('+')
  if (plus > 0) name = name.slice(0, plus)
  if (found === null) return `${name}@${domain}`
  const { rule } = found.compiled
  for (const [from, to] of Object.entries(rule.equivalent ?? {})) name = name.replaceAll(from, to)
  for (const character of rule.ignored ?? []) name = name.replaceAll(character, '')
  return `${name}@${found.compiled.domain}`
}
