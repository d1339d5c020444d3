import { createHash, createSecretKey, type KeyObject } from 'node:crypto'
import { open } from 'node:fs/promises'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { FormatRegistry } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import type { TObject, TSchema } from '@sinclair/typebox'
import type { ValueError } from '@sinclair/typebox/errors'
import { BrandSchema, CaptchaSchema, KeySchema, ReviewAddressSchema, TenantSchema, TenantsFileSchema, WebhookEndpointSchema, type KeyEntry, type TenantEntry, type TenantsFile, type TierEntry, type WebhookEndpointEntry, type ReviewAddressEntry } from '../../schemas/tenants.js'
import { SITEVERIFY_URLS, type CaptchaSettings } from '../captcha/siteverify.js'
import { isKeyMode } from '../keys/api-keys.js'
import { parseRateLimit, type VelocityLimits } from '../limits/rate-limit.js'
import { parseWindow } from '../limits/window.js'
import { TemplateFolders } from '../mail/templating/template-files.js'
import { CheckedParts, TemplatesError, TenantTemplates } from '../mail/templating/tenant-templates.js'
import { IpRangeSet, type IpRangeSetBuild } from '../net/ip-ranges.js'
import { workloadMatcher } from '../net/workload-identity.js'
import { describeEmailRejection, validateEmail } from '../recipients/address.js'
import { RecipientPolicy } from '../recipients/policy.js'
import { originMatcher } from '../tenants/origins.js'
import { TenantRegistry, type RefusedKey, type RefusedTenant } from '../tenants/registry.js'
import type { ReviewAddress, Tenant, TenantKey, Tier, WebhookEndpoint } from '../tenants/tenant.js'
import { checkEndpointUrl } from '../webhooks/endpoint-url.js'
import { describeJsonError } from '../json-position.js'
import { BuiltLists } from './lists.js'
import { passesSchema, schemaErrors, type SchemaProblem, type WalkContext } from './schema-walk.js'
import { LoadTurns } from './turns.js'

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
  /** Template parts checked by the previous load, reused where unchanged; it records this load's. */
  checkedParts?: CheckedParts
  /** Lists checked and built by the previous load, reused where unchanged; it records this load's. */
  builtLists?: BuiltLists
  /** Counts this load's turns: their units and CPU time. */
  turns?: LoadTurns
}

/** TENANTS_FILE_MAX_BYTES unless set: a Kubernetes Secret or ConfigMap holds at most 1 MiB. */
export const DEFAULT_TENANTS_FILE_MAX_BYTES = 4 * 1024 * 1024

export interface RegistryFileOptions {
  /** The root of the tenants' template folders (TEMPLATES_DIR); default `templates/` beside the tenants file. */
  templatesDir?: string
  /** A larger file is refused unread (TENANTS_FILE_MAX_BYTES); default DEFAULT_TENANTS_FILE_MAX_BYTES. */
  maxBytes?: number
  /** Template parts checked by the previous load, reused where unchanged; it records this load's. */
  checkedParts?: CheckedParts
  /** Lists checked and built by the previous load, reused where unchanged; it records this load's. */
  builtLists?: BuiltLists
  /** Counts this load's turns: their units and CPU time. */
  turns?: LoadTurns
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
 * (each with its JSON pointer) when a problem is the file's rather than one tenant's. A tenant
 * whose own entry breaks a rule is refused alone (`TenantRegistry#refused`, with every one of
 * its problems); the others are served.
 */
export function registryFromJson (document: unknown, options: RegistryOptions = {}): TenantRegistry {
  return (options.turns ?? new LoadTurns()).atOnce(buildRegistry(document, options, null, null))
}

/** What the checks found of one tenant entry. */
interface TenantOutcome {
  id: string
  where: string
  entry: TenantEntry
  tenant: Tenant
  keys: Array<[string, Omit<TenantKey, 'tenant'>]>
  problems: string[]
  /** Listed after every other problem of the file, as `tenants check` has always shown them. */
  templateProblems: string[]
}

/**
 * The key entries of a tenant entry that name a key well enough to recognise it (a SHA-256, a
 * kind and a mode the schema accepts), however wrong the rest of the entry is.
 */
function recognisableKeys (entry: unknown): KeyEntry[] {
  const keys = (entry as { keys?: unknown } | null)?.keys
  if (!Array.isArray(keys)) return []
  return keys.filter((key): key is KeyEntry => {
    const candidate = key as Partial<KeyEntry> | null
    return typeof candidate?.sha256 === 'string' && /^[0-9a-f]{64}$/.test(candidate.sha256) &&
      (candidate.kind === 'secret' || candidate.kind === 'restricted') && isKeyMode(candidate.mode)
  })
}

function expiryOf (key: KeyEntry): number | null {
  if (typeof key.expiresAt !== 'string') return null
  const at = Date.parse(key.expiresAt)
  return Number.isNaN(at) ? null : at
}

/**
 * Builds the registry a step at a time: it pauses after each tenant and each template part it
 * checks, and within a tenant's lists whenever a turn's LOAD_TURN_UNITS are spent.
 */
function * buildRegistry (document: unknown, options: RegistryOptions, version: string | null, previous: TenantRegistry | null): Generator<void, TenantRegistry, void> {
  const context: WalkContext = { turns: options.turns ?? new LoadTurns(), lists: options.builtLists ?? new BuiltLists() }
  const schema = yield * schemaProblems(document, context)
  const file = document as TenantsFile
  // Problems that are not one tenant's: the file's shape, its tiers, a tenant that cannot be
  // named, what two tenants share. Any of them refuses the whole file.
  const fileProblems = schema.filter((problem) => !/^\/tenants\/\d+\/(?!id[/ ])/.test(problem))
  const readable = typeof document === 'object' && document !== null && !Array.isArray(document) &&
    Array.isArray(file.tenants) && typeof file.tiers === 'object' && file.tiers !== null && !Array.isArray(file.tiers)
  if (!readable) throw new TenantsFileError(describeProblems(schema), schema)
  const warnings: string[] = []
  const outcomes: TenantOutcome[] = []
  const templateProblems: string[] = []
  const seenIds = new Map<string, string>()
  const seenHashes = new Map<string, { where: string, tenant: string }>()
  for (const [index, entry] of file.tenants.entries()) {
    const where = `/tenants/${index}`
    const named = !schema.some((problem) => problem.startsWith(`${where} `) || problem.startsWith(`${where}/id `))
    if (!named) {
      // A tenant that cannot be named is the file's problem, and so is everything else wrong in it.
      if (typeof entry === 'object' && entry !== null) {
        const outcome = yield * checkTenant(entry, where, file, schema, options, context, warnings)
        fileProblems.push(...[...outcome.problems, ...outcome.templateProblems].filter((problem) => !fileProblems.includes(problem)))
      }
      continue
    }
    const firstAt = seenIds.get(entry.id)
    if (firstAt !== undefined) {
      fileProblems.push(`${where}/id appears twice (first at ${firstAt}/id)`)
      const outcome = yield * checkTenant(entry, where, file, schema, options, context, warnings)
      fileProblems.push(...outcome.problems, ...outcome.templateProblems)
      continue
    }
    seenIds.set(entry.id, where)
    for (const [keyIndex, key] of (Array.isArray(entry.keys) ? entry.keys : []).entries()) {
      if (!recognisableKeys({ keys: [key] }).length) continue
      const other = seenHashes.get(key.sha256)
      if (other !== undefined && other.tenant !== entry.id) fileProblems.push(`${where}/keys/${keyIndex}/sha256 is already used by a key of another tenant (${other.where})`)
      else if (other === undefined) seenHashes.set(key.sha256, { where: `${where}/keys/${keyIndex}/sha256`, tenant: entry.id })
    }
    const outcome = yield * checkTenant(entry, where, file, schema, options, context, warnings)
    templateProblems.push(...outcome.templateProblems)
    outcomes.push(outcome)
    yield
  }
  const tenantProblems = outcomes.flatMap((outcome) => outcome.problems)
  if (fileProblems.length > 0) {
    const problems = [...fileProblems, ...tenantProblems, ...templateProblems]
    throw new TenantsFileError(describeProblems(problems), problems)
  }
  const tenants = new Map<string, Tenant>()
  const keysByHash = new Map<string, TenantKey>()
  const refused = new Map<string, RefusedTenant>()
  const refusedKeys = new Map<string, RefusedKey>()
  for (const outcome of outcomes) {
    const problems = [...outcome.problems, ...outcome.templateProblems]
    if (problems.length === 0) {
      tenants.set(outcome.id, outcome.tenant)
      for (const [hash, key] of outcome.keys) keysByHash.set(hash, { ...key, tenant: outcome.tenant })
      continue
    }
    const kept = keptTenant(previous, outcome.id, recognisableKeys(outcome.entry))
    if (kept !== null) {
      tenants.set(outcome.id, kept.tenant)
      for (const [hash, key] of kept.keys) keysByHash.set(hash, key)
    }
    for (const key of recognisableKeys(outcome.entry)) {
      if (!keysByHash.has(key.sha256)) refusedKeys.set(key.sha256, { tenant: outcome.id, kind: key.kind, mode: key.mode, revoked: key.revoked === true, expiresAtMs: expiryOf(key) })
    }
    refused.set(outcome.id, { id: outcome.id, problems, serving: kept === null ? 'none' : 'previous' })
  }
  return new TenantRegistry(keysByHash, tenants, warnings, version, refused, refusedKeys)
}

/** A TenantsFileError's message: every problem, on one line. */
export function describeProblems (problems: readonly string[]): string {
  return `tenants file: ${problems.length === 1 ? '' : `${problems.length} problems: `}${problems.join('; ')}`
}

/**
 * A refused tenant's last good configuration, when the registry before this load served it:
 * an operator's typo in one field does not turn a serving tenant off. Its keys are those the
 * new entry still lists and does not revoke (a removal or revocation takes effect at once),
 * expiring no later than the new entry says.
 */
function keptTenant (previous: TenantRegistry | null, id: string, listed: readonly KeyEntry[]): { tenant: Tenant, keys: Array<[string, TenantKey]> } | null {
  const tenant = previous?.tenants.get(id)
  if (previous === null || tenant === undefined) return null
  const byHash = new Map(listed.map((key) => [key.sha256, key]))
  const keys: Array<[string, TenantKey]> = []
  for (const [hash, key] of previous.keysOf(id)) {
    const entry = byHash.get(hash)
    if (entry === undefined || entry.revoked === true || entry.kind !== key.kind || entry.mode !== key.mode) continue
    const expiresAtMs = [key.expiresAtMs, expiryOf(entry)].filter((at): at is number => at !== null)
    keys.push([hash, { ...key, expiresAtMs: expiresAtMs.length === 0 ? null : Math.min(...expiresAtMs) }])
  }
  return { tenant, keys }
}

/** Whether one field of an object the schema describes passes it, whatever its siblings hold (absent: when optional). */
function fieldClean (schema: TObject, value: unknown, field: string): boolean {
  const own = typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[field] : undefined
  if (own === undefined) return !(schema.required ?? []).includes(field)
  const fieldSchema = schema.properties[field]
  return fieldSchema !== undefined && Value.Check(fieldSchema, own)
}

/**
 * Every check of one tenant entry. Each part is checked when the schema accepts it, whatever
 * the rest of the entry holds, so that one run lists every problem of the tenant.
 */
function * checkTenant (entry: TenantEntry, where: string, file: TenantsFile, schema: readonly string[], options: RegistryOptions, context: WalkContext, warnings: string[]): Generator<void, TenantOutcome, void> {
  const problems = schema.filter((problem) => problem.startsWith(`${where}/`))
  // Each field is checked on its value, as the list of schema problems stops at
  // MAX_SCHEMA_PROBLEMS; the keys one at a time, below.
  const passing = new Set<string>()
  for (const [name, fieldSchema] of Object.entries(TenantSchema.properties as Record<string, TSchema>)) {
    if (name === 'keys') continue
    const value = (entry as Record<string, unknown>)[name]
    if (value === undefined ? !(TenantSchema.required as readonly string[] | undefined ?? []).includes(name) : yield * passesSchema(fieldSchema, value, context)) passing.add(name)
  }
  /** The schema accepts every field named (`keys/3`: one key). */
  const clean = (...fields: string[]): boolean => fields.every((field) => {
    const [name = '', index] = field.split('/')
    const value = (entry as Record<string, unknown>)[name]
    if (index !== undefined) return Array.isArray(value) && Value.Check(KeySchema, value[Number(index)])
    return passing.has(name)
  })
  const check = <T>(fallback: T, build: () => T): T => {
    try {
      return build()
    } catch (error) {
      if (!(error instanceof TenantsFileError)) throw error
      problems.push(...error.problems)
      return fallback
    }
  }
  const tierEntry = clean('tier') ? file.tiers[entry.tier] : undefined
  if (clean('tier') && tierEntry === undefined) problems.push(`${where}/tier names no tier of /tiers`)
  // A tier the schema refuses is the file's problem, listed once under /tiers.
  const usableTier = tierEntry !== undefined && clean('quota') && !schema.some((problem) => problem.startsWith(`/tiers/${entry.tier}/`) || problem.startsWith(`/tiers/${entry.tier} `)) ? tierEntry : undefined
  const brandClean = clean('brand')
  const recipients = clean('recipients') ? entry.recipients : undefined
  const recipientPolicy = new RecipientPolicy({
    blockDisposable: recipients?.blockDisposable ?? true,
    denyDomains: yield * domainSet(recipients?.denyDomains ?? [], context),
    allowDomains: yield * domainSet(recipients?.allowDomains ?? [], context)
  })
  const networks = clean('blockedNetworks') && entry.blockedNetworks !== undefined && entry.blockedNetworks.length > 0 ? yield * networkSet(entry.blockedNetworks, context) : null
  const tenant: Tenant = {
    id: entry.id,
    tier: usableTier === undefined ? PLACEHOLDER_TIER : check(PLACEHOLDER_TIER, () => effectiveTier(entry.tier, { ...usableTier, ...entry.quota }, `${where}/tier`)),
    brandName: (brandClean ? entry.brand?.name : undefined) ?? entry.id,
    from: fieldClean(BrandSchema, entry.brand, 'from') ? check(null, () => brandAddress(entry.brand?.from, `${where}/brand/from`)) : null,
    replyTo: fieldClean(BrandSchema, entry.brand, 'replyTo') ? check(null, () => brandAddress(entry.brand?.replyTo, `${where}/brand/replyTo`)) : null,
    ttlSeconds: (clean('ttlSeconds') ? entry.ttlSeconds : undefined) ?? null,
    limits: clean('limits') ? tenantLimits(entry.limits ?? {}) : {},
    recipientPolicy,
    blockedNetworks: networks === null ? null : check(null, () => usableNetworks(networks, `${where}/blockedNetworks`)),
    requireEndUserIp: entry.requireEndUserIp === true,
    addressHashKey: clean('addressHashKey') ? addressHashKey(entry.addressHashKey) : null,
    // Each entry of a list, and each field of the CAPTCHA settings, is checked when it passes the
    // schema itself: one run lists every problem.
    webhooks: Array.isArray(entry.webhooks) ? check([], () => webhookEndpoints(entry.webhooks ?? [], `${where}/webhooks`, (item) => Value.Check(WebhookEndpointSchema, item))) : [],
    captcha: typeof entry.captcha === 'object' && entry.captcha !== null
      ? check(null, () => {
        const settings = captchaSettings(entry.captcha, `${where}/captcha`, (field) => fieldClean(CaptchaSchema, entry.captcha, field))
        return clean('captcha') ? settings : null
      })
      : null,
    templates: TenantTemplates.builtin,
    reviewAddresses: Array.isArray(entry.reviewAddresses) ? check(new Map<string, ReviewAddress>(), () => reviewAddresses(entry.reviewAddresses ?? [], `${where}/reviewAddresses`, warnings, (item) => Value.Check(ReviewAddressSchema, item))) : new Map<string, ReviewAddress>()
  }
  const templateProblems: string[] = []
  // Template files are read from the tenant's folder, named by its id.
  if (clean('id', 'templates', 'constants', 'defaultLocale')) {
    try {
      tenant.templates = yield * TenantTemplates.loading(entry, {
        folder: options.templateFolders?.forTenant(entry.id) ?? null,
        brand: tenant.brandName,
        ...(tenant.ttlSeconds === null ? {} : { minutes: [Math.max(1, Math.floor(tenant.ttlSeconds / 60))] }),
        ...(options.checkedParts === undefined ? {} : { checked: options.checkedParts })
      })
    } catch (error) {
      if (!(error instanceof TemplatesError)) throw error
      for (const problem of error.problems) {
        const place = [problem.locale === null ? null : `locale ${problem.locale}`, problem.part].filter((name) => name !== null).join(', ')
        templateProblems.push(`${where}/${problem.pointer} (tenant ${entry.id}${place === '' ? '' : `, ${place}`}): ${problem.rule}`)
      }
    }
  }
  const keys: Array<[string, Omit<TenantKey, 'tenant'>]> = []
  const keyIds = new Map<string, string>()
  const hashes = new Map<string, string>()
  for (const [keyIndex, key] of (Array.isArray(entry.keys) ? entry.keys : []).entries()) {
    if (typeof key !== 'object' || key === null) continue
    const listed = (list: unknown): number => Array.isArray(list) ? list.length : 0
    yield * context.turns.take(1 + listed(key.origins) + listed(key.workloads))
    // A key the schema refuses still has the rules of its valid fields checked.
    const has = (...fields: string[]): boolean => fields.every((field) => fieldClean(KeySchema, key, field))
    const keyWhere = `${where}/keys/${keyIndex}`
    const before = problems.length
    const sameId = has('id') ? keyIds.get(key.id) : undefined
    if (sameId !== undefined) problems.push(`${keyWhere}/id appears twice in this tenant (first at ${sameId}/id)`)
    else if (has('id')) keyIds.set(key.id, keyWhere)
    const sameHash = has('sha256') ? hashes.get(key.sha256) : undefined
    if (sameHash !== undefined) problems.push(`${keyWhere}/sha256 is already used by another key of this tenant (${sameHash}/sha256)`)
    else if (has('sha256')) hashes.set(key.sha256, keyWhere)
    const origins = has('origins') ? key.origins ?? [] : []
    if (has('kind', 'origins') && key.kind === 'restricted' && origins.length === 0) problems.push(`${keyWhere}/origins: a restricted key needs at least one origin`)
    if (has('kind', 'origins') && key.kind === 'secret' && origins.length > 0) problems.push(`${keyWhere}/origins: only restricted keys have origins`)
    if (has('kind', 'allowance') && key.kind === 'secret' && key.allowance !== undefined) problems.push(`${keyWhere}/allowance: only restricted keys have a share of the allowance; secret keys use the whole of it`)
    const captchaRequired = clean('captcha') && has('kind', 'requireCaptcha') ? check(false, () => keyCaptchaRequired(entry, key, keyWhere)) : false
    if (!clean(`keys/${keyIndex}`) || problems.length > before) continue
    keys.push([key.sha256, {
      id: key.id,
      kind: key.kind,
      mode: key.mode,
      expiresAtMs: key.expiresAt === undefined ? null : Date.parse(key.expiresAt),
      revoked: key.revoked === true,
      allowsOrigin: key.kind === 'restricted' ? originMatcher(origins) : null,
      allowanceShare: key.kind === 'restricted' ? Number.parseInt(key.allowance ?? (clean('restrictedKeyAllowance') ? entry.restrictedKeyAllowance : undefined) ?? DEFAULT_RESTRICTED_KEY_ALLOWANCE, 10) / 100 : null,
      captchaRequired,
      allowsWorkload: key.workloads === undefined ? null : workloadMatcher(key.workloads)
    }])
  }
  return { id: entry.id, where, entry, tenant, keys, problems, templateProblems }
}

/**
 * Reads, parses and checks a tenants file, letting the event loop turn between tenants and
 * template parts. A file larger than `maxBytes` is refused before it is read.
 */
export async function registryFromFile (path: string, options: RegistryFileOptions = {}, previous: TenantRegistry | null = null): Promise<TenantRegistry> {
  const turns = options.turns ?? new LoadTurns()
  const text = await readTenantsFile(path, options.maxBytes ?? DEFAULT_TENANTS_FILE_MAX_BYTES)
  // Parsing and hashing 4 MiB take a few milliseconds each: a turn apiece.
  const document = turns.run(() => {
    try {
      return JSON.parse(text) as unknown
    } catch (error) {
      // Node's message quotes the text around the error, which can be the start of a secret.
      throw new TenantsFileError(`tenants file ${path} is not valid JSON: ${describeJsonError(text, error)}`)
    }
  })
  await nextTurn()
  const version = turns.run(() => tenantsFileVersion(text))
  await nextTurn()
  const templatesDir = options.templatesDir ?? TemplateFolders.besideTenantsFile(path)
  const registryOptions: RegistryOptions = {
    templateFolders: new TemplateFolders(templatesDir, path),
    turns,
    ...(options.checkedParts === undefined ? {} : { checkedParts: options.checkedParts }),
    ...(options.builtLists === undefined ? {} : { builtLists: options.builtLists })
  }
  return await turns.inTurns(buildRegistry(document, registryOptions, version, previous))
}

/** The file's text, or TenantsFileError when it cannot be read or is larger than `maxBytes` (then it is not read). */
export async function readTenantsFile (path: string, maxBytes: number): Promise<string> {
  const cannotRead = (error: unknown): TenantsFileError => new TenantsFileError(`tenants file ${path} cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`)
  let handle
  try {
    handle = await open(path, 'r')
  } catch (error) {
    throw cannotRead(error)
  }
  try {
    // The size of the file opened, not of whatever the path names a moment later.
    const { size } = await handle.stat()
    if (size > maxBytes) throw new TenantsFileError(`tenants file ${path} is ${size} bytes; TENANTS_FILE_MAX_BYTES allows ${maxBytes}`)
    return await handle.readFile('utf8')
  } catch (error) {
    if (error instanceof TenantsFileError) throw error
    throw cannotRead(error)
  } finally {
    await handle.close()
  }
}

/** At most this many schema problems are listed: a file can hold 100,000 bad entries. */
const MAX_SCHEMA_PROBLEMS = 100

/**
 * Every place the document breaks the schema, as `<JSON pointer> <what is wrong>`: the file
 * around its tenants first, then each tenant entry, pausing after each.
 */
function * schemaProblems (document: unknown, context: WalkContext): Generator<void, string[], void> {
  const problems = new Set<string>()
  /** Adds a problem; false once the list is full. */
  const found = (problem: SchemaProblem): boolean => {
    const path = problem.path || '/'
    if (problems.size === MAX_SCHEMA_PROBLEMS) {
      problems.add(`${path} … and more (only the first ${MAX_SCHEMA_PROBLEMS} are listed)`)
      return false
    }
    problems.add(`${path} ${problem.message}`)
    return true
  }
  const add = (errors: Iterable<ValueError>): boolean => {
    for (const error of errors) if (!found(error)) return false
    return true
  }
  const tenants = (document as { tenants?: unknown } | null)?.tenants
  if (typeof document !== 'object' || document === null || Array.isArray(document) || !Array.isArray(tenants)) {
    add(Value.Errors(TenantsFileSchema, document))
    return [...problems]
  }
  if (!add(Value.Errors(TenantsFileSchema, { ...document, tenants: [] }))) return [...problems]
  for (const [index, entry] of tenants.entries()) {
    if (!(yield * schemaErrors(TenantSchema, entry, `/tenants/${index}`, context, found))) break
    yield
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

/** The tenant's blocked networks, parsed a unit of a turn at a time, or taken from the load before when unchanged. */
function * networkSet (entries: readonly string[], { turns, lists }: WalkContext): Generator<void, IpRangeSetBuild, void> {
  return yield * lists.get('networks', entries, turns, function * () {
    const builder = IpRangeSet.builder()
    for (const entry of entries) {
      yield * turns.take()
      builder.add(entry)
    }
    const steps = builder.steps()
    for (let step = steps.next(); ; step = steps.next()) {
      if (step.done === true) return step.value
      yield * turns.take(step.value)
    }
  })
}

function usableNetworks ({ set, rejected }: IpRangeSetBuild, where: string): IpRangeSet {
  if (rejected > 0) throw new TenantsFileError(`${where}: ${rejected} entries are not addresses or CIDRs`)
  return set
}

/** Domains as the recipient policy looks them up, added a unit of a turn at a time, or taken from the load before when unchanged. */
function * domainSet (entries: readonly string[], { turns, lists }: WalkContext): Generator<void, ReadonlySet<string>, void> {
  return yield * lists.get('domains', entries, turns, function * () {
    const set = new Set<string>()
    for (const entry of entries) {
      yield * turns.take()
      set.add(entry)
    }
    return set
  })
}

/** The schema's pattern already admits only base64 of 32 bytes or more. */
function addressHashKey (value: string | undefined): KeyObject | null {
  return value === undefined ? null : createSecretKey(Buffer.from(value, 'base64'))
}

/** Throws one TenantsFileError listing every problem, if there is any. */
function refuseAll (problems: readonly string[]): void {
  if (problems.length > 0) throw new TenantsFileError(problems.join('; '), problems)
}

/** The endpoints, every entry the schema accepts checked (`usable`), every problem listed at once. */
function webhookEndpoints (entries: readonly WebhookEndpointEntry[], where: string, usable: (entry: unknown) => boolean): WebhookEndpoint[] {
  const seen = new Set<string>()
  const problems: string[] = []
  const endpoints: WebhookEndpoint[] = []
  for (const [index, entry] of entries.entries()) {
    if (!usable(entry)) continue
    const checked = checkEndpointUrl(entry.url)
    if (!checked.ok) {
      problems.push(`${where}/${index}/url ${checked.problem}`)
    } else if (seen.has(checked.url.href)) {
      problems.push(`${where}/${index}/url appears twice in this tenant`)
    } else {
      seen.add(checked.url.href)
    }
    const secretBytes = Buffer.from(entry.secret.slice('whsec_'.length), 'base64').length
    if (secretBytes < 24 || secretBytes > 64) problems.push(`${where}/${index}/secret must be whsec_ and the base64 of 24 to 64 bytes`)
    if (checked.ok) endpoints.push({ url: checked.url.href, secret: entry.secret, events: new Set(entry.events) })
  }
  refuseAll(problems)
  return endpoints
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
  if (window === null) throw new TenantsFileError(`${where}: the tier's window is not a window`)
  return { name, live: { limit: entry.allowance, window }, test: { limit: entry.sandboxAllowance, window } }
}

/** The CAPTCHA settings; each rule is checked when the fields it reads pass the schema (`has`). */
function captchaSettings (entry: TenantEntry['captcha'], where: string, has: (field: string) => boolean = () => true): CaptchaSettings | null {
  if (entry === undefined) return null
  const problems: string[] = []
  const siteverifyUrl = entry.siteverifyUrl ?? SITEVERIFY_URLS[entry.provider]
  if (has('siteverifyUrl') && has('provider')) {
    let url: URL | null = null
    try {
      url = new URL(siteverifyUrl)
    } catch {
      problems.push(`${where}/siteverifyUrl is not a URL`)
    }
    const loopback = url !== null && (['localhost', '127.0.0.1', '[::1]'].includes(url.hostname) || url.hostname.startsWith('127.'))
    if (url !== null && url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) problems.push(`${where}/siteverifyUrl must be https (http only on a loopback host)`)
  }
  if (has('minScore') && has('provider') && entry.minScore !== undefined && entry.provider !== 'recaptcha') problems.push(`${where}/minScore: only reCAPTCHA v3 answers a score`)
  refuseAll(problems)
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
function reviewAddresses (entries: readonly ReviewAddressEntry[], where: string, warnings: string[], usable: (entry: unknown) => boolean): Map<string, ReviewAddress> {
  const result = new Map<string, ReviewAddress>()
  const problems: string[] = []
  const now = Date.now()
  for (const [index, entry] of entries.entries()) {
    if (!usable(entry)) continue
    const at = `${where}/${index}`
    const checked = validateEmail(entry.address)
    if (!checked.ok) problems.push(`${at}/address is not an acceptable address`)
    const expiresAtMs = Date.parse(entry.expiresAt)
    if (Number.isNaN(expiresAtMs)) problems.push(`${at}/expiresAt is not a date-time`)
    else if (expiresAtMs > now + REVIEW_ADDRESS_MAX_DAYS * 86_400_000) problems.push(`${at}/expiresAt is more than ${REVIEW_ADDRESS_MAX_DAYS} days ahead`)
    if (!checked.ok || Number.isNaN(expiresAtMs)) continue
    if (expiresAtMs <= now) {
      warnings.push(`${at}: the review address has expired and is ignored`)
      continue
    }
    const address = checked.email.address.toLowerCase()
    if (result.has(address)) problems.push(`${at}/address appears twice`)
    else result.set(address, { codeSha256: entry.codeSha256, expiresAtMs })
  }
  refuseAll(problems)
  return result
}
