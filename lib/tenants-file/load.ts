import { createHash, createSecretKey, type KeyObject } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { FormatRegistry } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { TenantsFileSchema, type KeyEntry, type TenantEntry, type TenantsFile, type TierEntry, type WebhookEndpointEntry, type ReviewAddressEntry } from '../../schemas/tenants.js'
import { SITEVERIFY_URLS, type CaptchaSettings } from '../captcha/siteverify.js'
import { parseRateLimit, type VelocityLimits } from '../limits/rate-limit.js'
import { parseWindow } from '../limits/window.js'
import { TemplateFolders } from '../mail/template-files.js'
import { TemplatesError, TenantTemplates } from '../mail/tenant-templates.js'
import { IpRangeSet } from '../net/ip-ranges.js'
import { workloadMatcher } from '../net/workload-identity.js'
import { describeEmailRejection, validateEmail } from '../recipients/address.js'
import { RecipientPolicy } from '../recipients/policy.js'
import { originMatcher } from '../tenants/origins.js'
import { TenantRegistry } from '../tenants/registry.js'
import type { ReviewAddress, Tenant, TenantKey, Tier, WebhookEndpoint } from '../tenants/tenant.js'
import { checkEndpointUrl } from '../webhooks/endpoint-url.js'

if (!FormatRegistry.Has('date-time')) {
  FormatRegistry.Set('date-time', (value) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(value) && !Number.isNaN(Date.parse(value)))
}

/** How far ahead a review address may expire: a forgotten entry is a standing way in. */
export const REVIEW_ADDRESS_MAX_DAYS = 90

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
 * Builds the registry, or throws one TenantsFileError listing every problem of the file
 * (each with its JSON pointer), so that one run shows all there is to fix.
 */
export function registryFromJson (document: unknown, options: RegistryOptions = {}): TenantRegistry {
  return buildRegistry(document, options, null)
}

function buildRegistry (document: unknown, options: RegistryOptions, version: string | null): TenantRegistry {
  const problems = schemaProblems(document)
  // The checks below read the file as typed: only tenants the schema accepts are checked, and
  // only when the rest of the file (tiers, the tenants list itself) is well formed.
  const tenantWithProblem = (index: number): boolean => problems.some((problem) => problem.startsWith(`/tenants/${index}/`) || problem.startsWith(`/tenants/${index} `))
  const structural = problems.some((problem) => !/^\/tenants\/\d+[/ ]/.test(problem))
  const file = document as TenantsFile
  const tenants = new Map<string, Tenant>()
  const keysByHash = new Map<string, TenantKey>()
  const templateProblems: string[] = []
  const warnings: string[] = []
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
      templates: TenantTemplates.builtin,
      reviewAddresses: check(new Map<string, ReviewAddress>(), () => reviewAddresses(entry.reviewAddresses ?? [], `${where}/reviewAddresses`, warnings))
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
  return new TenantRegistry(keysByHash, tenants, warnings, version)
}

export async function registryFromFile (path: string, options: RegistryFileOptions = {}): Promise<TenantRegistry> {
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
  return buildRegistry(document, { templateFolders: new TemplateFolders(templatesDir, path) }, tenantsFileVersion(text))
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

/**
 * A tenant's review addresses. An expiry more than REVIEW_ADDRESS_MAX_DAYS ahead refuses the
 * file; a past one is left out with a warning, so a stale entry never blocks a reload.
 */
function reviewAddresses (entries: readonly ReviewAddressEntry[], where: string, warnings: string[]): Map<string, ReviewAddress> {
  const result = new Map<string, ReviewAddress>()
  const now = Date.now()
  for (const [index, entry] of entries.entries()) {
    const at = `${where}/${index}`
    const checked = validateEmail(entry.address)
    if (!checked.ok) throw new TenantsFileError(`${at}/address is not an acceptable address`)
    const expiresAtMs = Date.parse(entry.expiresAt)
    if (Number.isNaN(expiresAtMs)) throw new TenantsFileError(`${at}/expiresAt is not a date-time`)
    if (expiresAtMs > now + REVIEW_ADDRESS_MAX_DAYS * 86_400_000) throw new TenantsFileError(`${at}/expiresAt is more than ${REVIEW_ADDRESS_MAX_DAYS} days ahead`)
    if (expiresAtMs <= now) {
      warnings.push(`${at}: the review address expired at ${entry.expiresAt} and is ignored`)
      continue
    }
    const address = checked.email.address.toLowerCase()
    if (result.has(address)) throw new TenantsFileError(`${at}/address appears twice`)
    result.set(address, { codeSha256: entry.codeSha256, expiresAtMs })
  }
  return result
}
