import MailChecker from 'mailchecker'

/** The maintained disposable-domain list, loaded once. */
const disposableDomains: ReadonlySet<string> = MailChecker.blacklist()

/** The domain and each parent domain: `a.b.example.com` → itself, `b.example.com`, `example.com`, `com`. */
function * domainAndParents (domain: string): Generator<string> {
  let rest = domain
  while (true) {
    yield rest
    const dot = rest.indexOf('.')
    if (dot < 0) return
    rest = rest.slice(dot + 1)
  }
}

function listedIn (domain: string, set: ReadonlySet<string>): boolean {
  for (const candidate of domainAndParents(domain)) if (set.has(candidate)) return true
  return false
}

export interface RecipientPolicyOptions {
  blockDisposable: boolean
  denyDomains: ReadonlySet<string>
  allowDomains: ReadonlySet<string>
}

export type RecipientVerdict = 'allowed' | 'disposable' | 'denied'

/** Which recipient domains a tenant sends to. Subdomains follow their parent's verdict. */
export class RecipientPolicy {
  readonly #blockDisposable: boolean
  readonly #deny: ReadonlySet<string>
  readonly #allow: ReadonlySet<string>

  constructor (options: RecipientPolicyOptions) {
    this.#blockDisposable = options.blockDisposable
    this.#deny = options.denyDomains
    this.#allow = options.allowDomains
  }

  /** `domain` is the validated, lower-case ASCII domain. */
  check (domain: string): RecipientVerdict {
    if (listedIn(domain, this.#deny)) return 'denied'
    if (!this.#blockDisposable || listedIn(domain, this.#allow)) return 'allowed'
    return listedIn(domain, disposableDomains) ? 'disposable' : 'allowed'
  }
}
