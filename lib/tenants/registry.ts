import { createHash, createSecretKey, type KeyObject } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { FormatRegistry } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { TenantsFileSchema, type KeyEntry, type TenantEntry, type TenantsFile, type TierEntry, type WebhookEndpointEntry } from '../../schemas/tenants.js'
import type { WebhookEventType } from '../../schemas/webhooks.js'
import { SITEVERIFY_URLS, type CaptchaSettings } from '../captcha/siteverify.js'
import { TemplateFolders } from '../mail/template-files.js'
import { TemplatesError, TenantTemplates } from '../mail/tenant-templates.js'
import { checkEndpointUrl } from '../webhooks/endpoint-url.js'
import { describeEmailRejection, validateEmail } from '../recipients/address.js'
import { hashKey, parseKey, type KeyKind, type KeyMode } from './api-keys.js'
import { IpRangeSet } from '../net/ip-ranges.js'
import { workloadMatcher } from '../net/workload-identity.js'
import { parseWindow, type QuotaWindow } from '../quota/window.js'
import { parseRateLimit, type VelocityLimits } from '../admission/velocity.js'
import { RecipientPolicy } from '../recipients/policy.js'

if (!FormatRegistry.Has('date-time')) {
  FormatRegistry.Set('date-time', (value) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(value) && !Number.isNaN(Date.parse(value)))
}

export interface Allowance {
  limit: number
  window: QuotaWindow
}

/** A tenant's tier with its per-tenant overrides applied, windows parsed once. */
export interface Tier {
  name: string
  live: Allowance
  test: Allowance
}

export interface Tenant {
  id: string
  tier: Tier
  brandName: string
  /** Sender and Reply-To of this tenant's mail; null means MAIL_FROM and none. */
  from: string | null
  replyTo: string | null
  ttlSeconds: number | null
  /** Velocity limits this tenant overrides; the rest come from the configuration. */
  limits: Partial<VelocityLimits>
  recipientPolicy: RecipientPolicy
  /** Networks this tenant refuses requests from, or null. */
  blockedNetworks: IpRangeSet | null
  /** Its secret keys must say which end user they call for (End-User-IP). */
  requireEndUserIp: boolean
  /** The key receipts and webhook events hash the recipient address under; null: a derived one. */
  addressHashKey: KeyObject | null
  webhooks: readonly WebhookEndpoint[]
  /** The CAPTCHA its dispatches must pass, or null. */
  captcha: CaptchaSettings | null
  /** Its message wording (its own templates, the built-in wording elsewhere) and languages. */
  templates: TenantTemplates
}

/** Where a tenant's events go: a URL is one endpoint (its identity in the delivery queue). */
export interface WebhookEndpoint {
  url: string
  /** `whsec_…`, as the Standard Webhooks libraries take it. */
  secret: string
  events: ReadonlySet<WebhookEventType>
}

export interface TenantKey {
  id: string
  kind: KeyKind
  mode: KeyMode
  tenant: Tenant
  expiresAtMs: number | null
  revoked: boolean
  /** Null for secret keys; for restricted keys, the Origin test. */
  allowsOrigin: ((origin: string) => boolean) | null
  /** Restricted keys: the fraction of the tenant's allowance the key may use; null for secret keys. */
  allowanceShare: number | null
  /** Its dispatches need a CAPTCHA token (the tenant's `captcha`). */
  captchaRequired: boolean
  /** Null when any caller may use the key; else whether a workload identity may (`workloads`). */
  allowsWorkload: ((identity: string) => boolean) | null
}

/** A restricted key may use this share of its tenant's allowance unless the file says otherwise. */
export const DEFAULT_RESTRICTED_KEY_ALLOWANCE = '10%'

/** The tenants file could not be used; the message names the place in the file. */
export class TenantsFileError extends Error {
  /** Each problem on its own (refused templates are all listed, across tenants). */
  readonly problems: readonly string[]
  constructor (message: string, problems: readonly string[] = [message]) {
    super(message)
    this.name = 'TenantsFileError'
    this.problems = problems
  }
}

export interface RegistryOptions {
  /** Where each tenant's `{ "file": … }` templates are read; without it, only inline templates load. */
  templateFolders?: TemplateFolders
}

export interface RegistryFileOptions {
  /** The root of the tenants' template folders (TEMPLATES_DIR); default `templates/` beside the tenants file. */
  templatesDir?: string
}

/**
 * A tenants file's version, as logs and metrics name it: the first 16 hex digits of the
 * SHA-256 of its bytes (`sha256sum tenants.json | cut -c1-16`), so an operator can tell which
 * pods hold which file.
 */
export function tenantsFileVersion (text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 16)
}

/**
 * Tenants, tiers and keys, indexed by key hash. Immutable: a reload builds a new registry
 * and swaps the reference, so requests in flight finish on the one they started with.
 */
export class TenantRegistry {
  readonly #keysByHash: ReadonlyMap<string, TenantKey>
  readonly tenants: ReadonlyMap<string, Tenant>
  #version: string | null = null

  private constructor (keysByHash: Map<string, TenantKey>, tenants: Map<string, Tenant>) {
    this.#keysByHash = keysByHash
    this.tenants = tenants
  }

  /**
   * Builds the registry, or throws one TenantsFileError listing every problem of the file
   * (each with its JSON pointer), so that one run shows all there is to fix.
   */
  static fromJson (document: unknown, options: RegistryOptions = {}): TenantRegistry {
    const problems = schemaProblems(document)
    // The checks below read the file as typed: only tenants the schema accepts are checked, and
    // only when the rest of the file (tiers, the tenants list itself) is well formed.
    const tenantWithProblem = (index: number): boolean => problems.some((problem) => problem.startsWith(`/tenants/${index}/`) || problem.startsWith(`/tenants/${index} `))
    const structural = problems.some((problem) => !/^\/tenants\/\d+[/ ]/.test(problem))
    const file = document as TenantsFile
    const tenants = new Map<string, Tenant>()
    const keysByHash = new Map<string, TenantKey>()
    const templateProblems: string[] = []
    const check = <T>(fallback: T, build: () => T): T => {
      try {
        return build()
      } catch (error) {
        if (!(error instanceof TenantsFileError)) throw error
        problems.push(...error.problems)
        return fallback
      }
    }
    for (const [index, entry] of (structural ? [] : file.tenants.entries())) {
      if (tenantWithProblem(index)) continue
      const where = `/tenants/${index}`
      const tierEntry = file.tiers[entry.tier]
      if (tierEntry === undefined) problems.push(`${where}/tier names an unknown tier "${entry.tier}"`)
      if (tenants.has(entry.id)) problems.push(`${where}/id "${entry.id}" appears twice`)
      const tenant: Tenant = {
        id: entry.id,
        tier: tierEntry === undefined ? PLACEHOLDER_TIER : check(PLACEHOLDER_TIER, () => effectiveTier(entry.tier, { ...tierEntry, ...entry.quota }, where)),
        brandName: entry.brand?.name ?? entry.id,
        from: check(null, () => brandAddress(entry.brand?.from, `${where}/brand/from`)),
        replyTo: check(null, () => brandAddress(entry.brand?.replyTo, `${where}/brand/replyTo`)),
        ttlSeconds: entry.ttlSeconds ?? null,
        limits: tenantLimits(entry.limits ?? {}),
        recipientPolicy: new RecipientPolicy({
          blockDisposable: entry.recipients?.blockDisposable ?? true,
          denyDomains: entry.recipients?.denyDomains ?? [],
          allowDomains: entry.recipients?.allowDomains ?? []
        }),
        blockedNetworks: check(null, () => blockedNetworks(entry.blockedNetworks, `${where}/blockedNetworks`)),
        requireEndUserIp: entry.requireEndUserIp === true,
        addressHashKey: addressHashKey(entry.addressHashKey),
        webhooks: check([], () => webhookEndpoints(entry.webhooks ?? [], `${where}/webhooks`)),
        captcha: check(null, () => captchaSettings(entry.captcha, `${where}/captcha`)),
        templates: TenantTemplates.builtin
      }
      try {
        tenant.templates = TenantTemplates.load(entry, {
          folder: options.templateFolders?.forTenant(entry.id) ?? null,
          brand: tenant.brandName,
          ...(entry.ttlSeconds === undefined ? {} : { minutes: [Math.max(1, Math.floor(entry.ttlSeconds / 60))] })
        })
      } catch (error) {
        if (!(error instanceof TemplatesError)) throw error
        for (const problem of error.problems) {
          templateProblems.push(`/tenants/${index}/${problem.pointer} (tenant ${entry.id}, locale ${problem.locale}${problem.part === null ? '' : `, ${problem.part}`}): ${problem.rule}`)
        }
      }
      if (!tenants.has(entry.id)) tenants.set(entry.id, tenant)
      const keyIds = new Set<string>()
      for (const [keyIndex, key] of entry.keys.entries()) {
        const keyWhere = `${where}/keys/${keyIndex}`
        const before = problems.length
        if (keyIds.has(key.id)) problems.push(`${keyWhere}/id "${key.id}" appears twice in this tenant`)
        keyIds.add(key.id)
        if (keysByHash.has(key.sha256)) problems.push(`${keyWhere}/sha256 is already used by another key`)
        const origins = key.origins ?? []
        if (key.kind === 'restricted' && origins.length === 0) problems.push(`${keyWhere}/origins: a restricted key needs at least one origin`)
        if (key.kind === 'secret' && origins.length > 0) problems.push(`${keyWhere}/origins: only restricted keys have origins`)
        if (key.kind === 'secret' && key.allowance !== undefined) problems.push(`${keyWhere}/allowance: only restricted keys have a share of the allowance; secret keys use the whole of it`)
        const captchaRequired = check(false, () => keyCaptchaRequired(entry, key, keyWhere))
        if (problems.length > before) continue
        keysByHash.set(key.sha256, {
          id: key.id,
          kind: key.kind,
          mode: key.mode,
          tenant,
          expiresAtMs: key.expiresAt === undefined ? null : Date.parse(key.expiresAt),
          revoked: key.revoked === true,
          allowsOrigin: key.kind === 'restricted' ? originMatcher(origins) : null,
          allowanceShare: key.kind === 'restricted' ? Number.parseInt(key.allowance ?? entry.restrictedKeyAllowance ?? DEFAULT_RESTRICTED_KEY_ALLOWANCE, 10) / 100 : null,
          captchaRequired,
          allowsWorkload: key.workloads === undefined ? null : workloadMatcher(key.workloads)
        })
      }
    }
    problems.push(...templateProblems)
    if (problems.length > 0) {
      throw new TenantsFileError(`tenants file: ${problems.length === 1 ? '' : `${problems.length} problems: `}${problems.join('; ')}`, problems)
    }
    return new TenantRegistry(keysByHash, tenants)
  }

  static async fromFile (path: string, options: RegistryFileOptions = {}): Promise<TenantRegistry> {
    let text: string
    try {
      text = await readFile(path, 'utf8')
    } catch (error) {
      throw new TenantsFileError(`tenants file ${path} cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`)
    }
    let document: unknown
    try {
      document = JSON.parse(text)
    } catch (error) {
      throw new TenantsFileError(`tenants file ${path} is not valid JSON: ${(error as Error).message}`)
    }
    const templatesDir = options.templatesDir ?? TemplateFolders.besideTenantsFile(path)
    const registry = TenantRegistry.fromJson(document, { templateFolders: new TemplateFolders(templatesDir, path) })
    registry.#version = tenantsFileVersion(text)
    return registry
  }

  /** The version of the file it was read from (tenantsFileVersion); null when not read from a file. */
  get version (): string | null {
    return this.#version
  }

  /**
   * The key record for a presented key, or null. Unknown, revoked, expired and malformed
   * keys are all null: callers answer one identical 401.
   */
  authenticate (presented: string, nowMs: number): TenantKey | null {
    const claimed = parseKey(presented)
    if (claimed === null) return null
    const key = this.#keysByHash.get(hashKey(presented))
    if (key === undefined || key.revoked || key.kind !== claimed.kind || key.mode !== claimed.mode) return null
    if (key.expiresAtMs !== null && key.expiresAtMs <= nowMs) return null
    return key
  }
}

/** At most this many schema problems are listed: a file can hold 100,000 bad entries. */
const MAX_SCHEMA_PROBLEMS = 100

/** Every place the document breaks the schema, as `<JSON pointer> <what is wrong>`. */
function schemaProblems (document: unknown): string[] {
  const problems = new Set<string>()
  for (const error of Value.Errors(TenantsFileSchema, document)) {
    if (problems.size === MAX_SCHEMA_PROBLEMS) {
      problems.add(`${error.path || '/'} … and more (only the first ${MAX_SCHEMA_PROBLEMS} are listed)`)
      break
    }
    problems.add(`${error.path || '/'} ${error.message}`)
  }
  return [...problems]
}

/** Stands in for a tier the file gets wrong while the rest of the tenant is checked. */
const PLACEHOLDER_TIER: Tier = effectiveTier('', { allowance: 0, window: '1d', sandboxAllowance: 0 }, '')

function tenantLimits (entry: Partial<Record<keyof VelocityLimits, string>>): Partial<VelocityLimits> {
  const limits: Partial<VelocityLimits> = {}
  for (const name of ['source', 'backend', 'recipient', 'key'] as const) {
    const spec = entry[name]
    // The schema's pattern already admits only `max/window`.
    const parsed = spec === undefined ? null : parseRateLimit(spec)
    if (parsed !== null) limits[name] = parsed
  }
  return limits
}

function blockedNetworks (entries: string[] | undefined, where: string): IpRangeSet | null {
  if (entries === undefined || entries.length === 0) return null
  const { set, rejected } = IpRangeSet.fromEntries(entries)
  if (rejected > 0) throw new TenantsFileError(`${where}: ${rejected} entries are not addresses or CIDRs`)
  return set
}

/** The schema's pattern already admits only base64 of 32 bytes or more. */
function addressHashKey (value: string | undefined): KeyObject | null {
  return value === undefined ? null : createSecretKey(Buffer.from(value, 'base64'))
}

function webhookEndpoints (entries: readonly WebhookEndpointEntry[], where: string): WebhookEndpoint[] {
  const seen = new Set<string>()
  return entries.map((entry, index) => {
    const checked = checkEndpointUrl(entry.url)
    if (!checked.ok) throw new TenantsFileError(`${where}/${index}/url ${checked.problem}`)
    if (seen.has(checked.url.href)) throw new TenantsFileError(`${where}/${index}/url appears twice in this tenant`)
    seen.add(checked.url.href)
    const secretBytes = Buffer.from(entry.secret.slice('whsec_'.length), 'base64').length
    if (secretBytes < 24 || secretBytes > 64) throw new TenantsFileError(`${where}/${index}/secret must be whsec_ and the base64 of 24 to 64 bytes`)
    return { url: checked.url.href, secret: entry.secret, events: new Set(entry.events) }
  })
}

/** Sender addresses go into mail headers: they pass the same policy as recipients. */
function brandAddress (value: string | undefined, where: string): string | null {
  if (value === undefined) return null
  const checked = validateEmail(value)
  if (!checked.ok) throw new TenantsFileError(`${where}: ${describeEmailRejection(checked.reason)}`)
  return checked.email.address
}

function effectiveTier (name: string, entry: TierEntry, where: string): Tier {
  const window = parseWindow(entry.window)
  if (window === null) throw new TenantsFileError(`${where}: tier "${name}" has an invalid window "${entry.window}"`)
  return { name, live: { limit: entry.allowance, window }, test: { limit: entry.sandboxAllowance, window } }
}

/**
 * Allow-list test for a browser Origin. `app.example.com` matches that host on any scheme
 * and port; `*.example.com` matches its subdomains (not example.com itself);
 * `http://localhost:5173` matches that exact origin.
 */
export function originMatcher (patterns: readonly string[]): (origin: string) => boolean {
  const exactOrigins = new Set(patterns.filter((pattern) => pattern.includes('://')))
  const exactHosts = new Set(patterns.filter((pattern) => !pattern.includes('://') && !pattern.startsWith('*.')))
  const suffixes = patterns.filter((pattern) => pattern.startsWith('*.')).map((pattern) => pattern.slice(1))
  return (origin) => {
    const parsed = parseOrigin(origin)
    if (parsed === null) return false
    if (exactOrigins.has(parsed.origin) || exactHosts.has(parsed.hostname)) return true
    return suffixes.some((suffix) => parsed.hostname.endsWith(suffix) && parsed.hostname.length > suffix.length)
  }
}

/** A well-formed browser Origin (`scheme://host[:port]`, nothing else), or null. */
export function parseOrigin (origin: string): { origin: string, hostname: string } | null {
  if (origin.length > 300 || !/^https?:\/\/[^/?#@\s]+$/i.test(origin)) return null
  try {
    const url = new URL(origin)
    return { origin: url.origin, hostname: url.hostname }
  } catch {
    return null
  }
}

/** The documented sandbox key of the built-in demo tenant: it can never send real mail. */
export const DEMO_SANDBOX_KEY = 'sk_test_DemoSandboxKeyForLocalUseOnly000000000'
/** The demo tenant's restricted sandbox key, for browser pages served from localhost. */
export const DEMO_RESTRICTED_KEY = 'rk_test_DemoRestrictedKeyForLocalhostOnly0000'

/** The tenant served when no TENANTS_FILE is configured. */
export function demoRegistry (): TenantRegistry {
  return TenantRegistry.fromJson({
    tiers: { demo: { allowance: 0, window: '1d', sandboxAllowance: 1000 } },
    tenants: [{
      id: 'demo',
      tier: 'demo',
      brand: { name: 'Email OTP demo' },
      keys: [
        { id: 'demo_secret', kind: 'secret', mode: 'test', sha256: hashKey(DEMO_SANDBOX_KEY) },
        { id: 'demo_restricted', kind: 'restricted', mode: 'test', sha256: hashKey(DEMO_RESTRICTED_KEY), origins: ['localhost', '127.0.0.1'] }
      ]
    }]
  } satisfies TenantsFile)
}

function captchaSettings (entry: TenantEntry['captcha'], where: string): CaptchaSettings | null {
  if (entry === undefined) return null
  const siteverifyUrl = entry.siteverifyUrl ?? SITEVERIFY_URLS[entry.provider]
  let url: URL
  try {
    url = new URL(siteverifyUrl)
  } catch {
    throw new TenantsFileError(`${where}/siteverifyUrl is not a URL`)
  }
  const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname) || url.hostname.startsWith('127.')
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) throw new TenantsFileError(`${where}/siteverifyUrl must be https (http only on a loopback host)`)
  if (entry.minScore !== undefined && entry.provider !== 'recaptcha') throw new TenantsFileError(`${where}/minScore: only reCAPTCHA v3 answers a score`)
  return {
    provider: entry.provider,
    secret: entry.secret,
    siteverifyUrl,
    expectedHostnames: (entry.expectedHostnames ?? []).map((host) => host.toLowerCase()),
    minScore: entry.minScore ?? null,
    expectedAction: entry.expectedAction ?? null
  }
}

/** A key's own `requireCaptcha`, else the tenant's `captcha.requireFor` (restricted keys by default). */
function keyCaptchaRequired (tenant: TenantEntry, key: KeyEntry, where: string): boolean {
  if (key.requireCaptcha === true && tenant.captcha === undefined) throw new TenantsFileError(`${where}/requireCaptcha: the tenant has no captcha to require`)
  if (key.requireCaptcha !== undefined) return key.requireCaptcha
  if (tenant.captcha === undefined) return false
  return (tenant.captcha.requireFor ?? 'restricted') === 'all' || key.kind === 'restricted'
}
