import { createHash } from 'node:crypto'
import type { TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { existsSync } from 'node:fs'
import { readFile, rename, writeFile } from 'node:fs/promises'
import { CommandError, envValue, helpFor, parse, required, text, UsageError, type Io } from './program.js'
import { TemplateFolders } from '../lib/mail/templating/template-files.js'
import { KEY_MODES, generateKey, hashKey, type KeyKind, type KeyMode } from '../lib/keys/api-keys.js'
import { generateCode } from '../lib/otp/codes.js'
import { describeEmailRejection, validateEmail } from '../lib/recipients/address.js'
import { describeJsonError } from '../lib/json-position.js'
import { describeProblems, registryFromJson, REVIEW_ADDRESS_MAX_DAYS, TenantsFileError } from '../lib/tenants-file/load.js'
import { KeySchema, TenantSchema, type KeyEntry, type TenantsFile } from '../schemas/tenants.js'

const createUsage = `  email-otp keys create --tenant ID --kind secret|restricted --mode live|test [--file PATH]
                        [--origin HOST]... [--expires ISO-8601] [--tier NAME] [--id KEY_ID]
                        [--templates DIR] [--workload IDENTITY]...`
const workloadsUsage = `  email-otp keys workloads --tenant ID --id KEY_ID [--workload IDENTITY]... [--any]
                           [--file PATH] [--templates DIR]`
const revokeUsage = '  email-otp keys revoke --tenant ID --id KEY_ID [--file PATH] [--templates DIR]'
const listUsage = '  email-otp keys list [--file PATH]'
const reviewUsage = '  email-otp keys review --tenant ID --address EMAIL [--days 1-90] [--file PATH] [--templates DIR]'
const reviewText = 'Gives the tenant\'s review address (app-store reviewers, end-to-end tests: no mail, no charge) a\nnew random code, valid --days (default 30, at most 90), replacing its old one. The code is\nprinted once on stdout; the file keeps only its SHA-256. Running services reload the\nchanged file by themselves (they watch it).'

const files = `--file defaults to $TENANTS_FILE, the file the service reads, else tenants.json; --templates
(the tenants' template folders, read to check the file as the service would) to $TEMPLATES_DIR,
else templates/ beside the tenants file.`

const workloadsHelp = `--workload binds a key to mesh workloads (MESH_IDENTITY_HEADER): an exact SPIFFE ID or
Linkerd identity, or a prefix ending in /* (spiffe://cluster.local/ns/payments/sa/*).
workloads prints a key's list; with --workload it replaces the list, with --any it removes
it (the key works for any caller again).`

const help: Record<string, string> = {
  '': `Usage:
${createUsage}
${workloadsUsage}
${revokeUsage}
${listUsage}
${reviewUsage}
  email-otp keys [COMMAND] --help

${files}
create prints the new key once on stdout and writes only its SHA-256 to the file (created
if missing; a missing tenant is added on the given or first tier); the key's id (for
revoke) is on stderr and in list. Running services reload the changed file by themselves
(they watch it; SIGHUP reloads it where a watch is not possible).
${workloadsHelp}`,
  create: `Usage:\n${createUsage}\n\nPrints the new key once on stdout and writes only its SHA-256 to the file (created if\nmissing; a missing tenant is added on the given or first tier). The key's id (for revoke) is\non stderr. A restricted key needs at least one --origin. Running services reload the changed file\nby themselves (they watch it).\n${files}`,
  workloads: `Usage:\n${workloadsUsage}\n\n${workloadsHelp}\n${files}`,
  revoke: `Usage:\n${revokeUsage}\n\nMarks the key revoked in the file (its id as list prints it). Running services reload the\nchanged file by themselves (they watch it).\n${files}`,
  review: `Usage:\n${reviewUsage}\n\n${reviewText}\n${files}`,
  list: `Usage:\n${listUsage}\n\nOne line per key: tenant, id, kind, mode, state (active, revoked, expired), expiry.\n--file defaults to $TENANTS_FILE, else tenants.json; a file that does not exist is an error.`
}

const DEFAULT_TIERS: TenantsFile['tiers'] = {
  standard: { allowance: 10000, window: 'month', sandboxAllowance: 1000 }
}

/** The tenants file; one that does not exist is an empty one only for create, which makes it. */
async function readTenantsFile (path: string, { create = false } = {}): Promise<TenantsFile> {
  if (!existsSync(path)) {
    if (create) return { tiers: structuredClone(DEFAULT_TIERS), tenants: [] }
    throw new CommandError(`${path} does not exist (keys create makes it; --file or TENANTS_FILE names another)`)
  }
  let document: unknown
  let source: string
  try {
    source = await readFile(path, 'utf8')
  } catch (error) {
    throw new CommandError(`${path} cannot be read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`)
  }
  try {
    document = JSON.parse(source)
  } catch (error) {
    // JSON.parse's message quotes the text around the error: the file holds secrets.
    throw new CommandError(`${path} cannot be read as JSON: ${describeJsonError(source, error)}`)
  }
  // Only the shape this command walks; the whole file is checked before it is written.
  const shaped = document as Partial<TenantsFile> | null
  if (typeof shaped !== 'object' || shaped === null || typeof shaped.tiers !== 'object' || !Array.isArray(shaped.tenants) || !shaped.tenants.every((tenant) => Array.isArray(tenant?.keys))) {
    throw new CommandError(`${path} is not a tenants file (email-otp tenants check ${path} lists its problems)`)
  }
  return shaped as TenantsFile
}

/** Validates with the service's own rules (template files included), then replaces the file atomically. */
async function writeTenantsFile (path: string, file: TenantsFile, templatesDir: string): Promise<void> {
  // The service would refuse such a tenant alone; this command writes nothing it would refuse.
  const problems = [...registryFromJson(file, { templateFolders: new TemplateFolders(templatesDir, path) }).refused.values()].flatMap((tenant) => tenant.problems)
  if (problems.length > 0) throw new TenantsFileError(describeProblems(problems), problems)
  const temporary = `${path}.${process.pid}.tmp`
  await writeFile(temporary, JSON.stringify(file, null, 2) + '\n', { mode: 0o600 })
  await rename(temporary, path)
}

/**
 * An option's value as the tenants file's schema takes it: a value it would refuse is the
 * command line's problem, named by its option, not a JSON path in the file.
 */
function accepted (name: string, value: string, schema: TSchema, expected: string): string {
  if (!Value.Check(schema, value)) throw new UsageError(`--${name} ${JSON.stringify(value)} is not ${expected}`)
  return value
}

const tenantOption = (values: Record<string, unknown>): string =>
  accepted('tenant', required(values, 'tenant'), TenantSchema.properties.id, 'a tenant id (1 to 63 lower-case letters, digits, - and _, starting with a letter or digit)')
const keyIdOf = (value: string): string => accepted('id', value, KeySchema.properties.id, 'a key id (1 to 64 letters, digits, - and _)')
const originsOf = (values: Record<string, unknown>): string[] => ((values.origin ?? []) as string[])
  .map((origin) => accepted('origin', origin, KeySchema.properties.origins.items, 'a host (app.example.com, *.example.com) or an exact origin (http://localhost:5173)'))
const workloadsOf = (values: Record<string, unknown>): string[] => ((values.workload ?? []) as string[])
  .map((workload) => accepted('workload', workload, KeySchema.properties.workloads.items, 'a workload identity (a SPIFFE ID or Linkerd identity, or a prefix ending in /*)'))

/** A tenant's key entry in the file, to change in place. */
function keyEntry (file: TenantsFile, path: string, tenantId: string, keyId: string): KeyEntry {
  const key = file.tenants.find((tenant) => tenant.id === tenantId)?.keys.find((entry) => entry.id === keyId)
  if (key === undefined) throw new CommandError(`no key ${keyId} for tenant ${tenantId} in ${path} (keys list shows them)`)
  return key
}

function oneOf<T extends string> (values: Record<string, unknown>, name: string, allowed: readonly T[]): T {
  const value = required(values, name)
  if (!(allowed as readonly string[]).includes(value)) throw new UsageError(`--${name} must be one of ${allowed.join(', ')}`)
  return value as T
}

export async function run (argv: string[], { out, note, env }: Io): Promise<void> {
  const { positionals, values } = parse(argv, {
    tenant: { type: 'string' },
    kind: { type: 'string' },
    mode: { type: 'string' },
    file: { type: 'string' },
    templates: { type: 'string' },
    origin: { type: 'string', multiple: true },
    expires: { type: 'string' },
    tier: { type: 'string' },
    id: { type: 'string' },
    workload: { type: 'string', multiple: true },
    any: { type: 'boolean' },
    address: { type: 'string' },
    days: { type: 'string' }
  })
  const [command, extra] = positionals
  if (values.help === true || command === 'help') {
    out(helpFor(help, positionals))
    return
  }
  if (command === undefined) throw new UsageError('a command is required: create, workloads, revoke, list or review')
  if (!['create', 'workloads', 'revoke', 'list', 'review'].includes(command)) throw new UsageError(`unknown command ${command}`)
  if (extra !== undefined) throw new UsageError(`unexpected argument ${extra}`)
  const path = text(values, 'file') ?? envValue(env, 'TENANTS_FILE') ?? 'tenants.json'
  if (path === '') throw new UsageError('--file must name a file')
  const templatesDir = text(values, 'templates') ?? envValue(env, 'TEMPLATES_DIR') ?? TemplateFolders.besideTenantsFile(path)

  if (command === 'list') {
    const file = await readTenantsFile(path)
    for (const tenant of file.tenants) {
      for (const key of tenant.keys) {
        const state = key.revoked === true ? 'revoked' : key.expiresAt !== undefined && Date.parse(key.expiresAt) <= Date.now() ? 'expired' : 'active'
        out(`${tenant.id}\t${key.id}\t${key.kind}\t${key.mode}\t${state}${key.expiresAt === undefined ? '' : `\texpires ${key.expiresAt}`}${key.workloads === undefined ? '' : `\tworkloads ${key.workloads.join(' ')}`}`)
      }
    }
    if (file.tenants.every((tenant) => tenant.keys.length === 0)) note(`No keys in ${path}.`)
    return
  }

  if (command === 'workloads') {
    const tenantId = tenantOption(values)
    const keyId = keyIdOf(required(values, 'id'))
    const file = await readTenantsFile(path)
    const key = keyEntry(file, path, tenantId, keyId)
    const workloads = workloadsOf(values)
    if (values.any === true && workloads.length > 0) throw new UsageError('--any and --workload exclude each other')
    if (values.any === true) {
      delete key.workloads
    } else if (workloads.length > 0) {
      key.workloads = workloads
    } else {
      out(key.workloads === undefined ? '(any caller)' : key.workloads.join('\n'))
      return
    }
    await writeTenantsFile(path, file, templatesDir)
    out(`${tenantId}/${keyId}: ${key.workloads === undefined ? 'any caller' : `workloads ${key.workloads.join(' ')}`}`)
    return
  }

  if (command === 'revoke') {
    const tenantId = tenantOption(values)
    const keyId = keyIdOf(required(values, 'id'))
    const file = await readTenantsFile(path)
    const key = keyEntry(file, path, tenantId, keyId)
    key.revoked = true
    await writeTenantsFile(path, file, templatesDir)
    out(`revoked ${tenantId}/${keyId}`)
    return
  }

  if (command === 'review') {
    const tenantId = tenantOption(values)
    const address = required(values, 'address')
    const checked = validateEmail(address)
    if (!checked.ok) throw new UsageError(`--address ${JSON.stringify(address)} is not an acceptable address: ${describeEmailRejection(checked.reason)}`)
    const daysText = text(values, 'days')
    const days = daysText === undefined ? 30 : Number(daysText)
    if (!Number.isInteger(days) || days < 1 || days > REVIEW_ADDRESS_MAX_DAYS) throw new UsageError(`--days must be a whole number from 1 to ${REVIEW_ADDRESS_MAX_DAYS}`)
    const file = await readTenantsFile(path)
    const tenant = file.tenants.find((entry) => entry.id === tenantId)
    if (tenant === undefined) throw new CommandError(`no tenant ${tenantId} in ${path}`)
    const code = generateCode()
    const entry = { address, codeSha256: createHash('sha256').update(code).digest('hex'), expiresAt: new Date(Date.now() + days * 86_400_000).toISOString() }
    // One entry per address: a new code replaces the old one.
    tenant.reviewAddresses = [...(tenant.reviewAddresses ?? []).filter((existing) => existing.address.toLowerCase() !== address.toLowerCase()), entry]
    await writeTenantsFile(path, file, templatesDir)
    out(code)
    note(`Review address ${address} of tenant ${tenantId} has a new code, valid until ${entry.expiresAt}.\nThis is the only time the code is shown. Running services reload the changed file by themselves (they watch it).`)
    return
  }

  const tenantId = tenantOption(values)
  const kind = oneOf<KeyKind>(values, 'kind', ['secret', 'restricted'])
  const mode = oneOf<KeyMode>(values, 'mode', KEY_MODES)
  const origins = originsOf(values)
  const workloads = workloadsOf(values)
  const chosenId = text(values, 'id')
  const keyId = chosenId === undefined ? undefined : keyIdOf(chosenId)
  if (kind === 'restricted' && origins.length === 0) throw new UsageError('a restricted key needs at least one --origin')
  if (kind === 'secret' && origins.length > 0) throw new UsageError('--origin is only for restricted keys')
  let expiresAt: string | undefined
  const expires = text(values, 'expires')
  if (expires !== undefined) {
    const instant = Date.parse(expires)
    if (Number.isNaN(instant)) throw new UsageError('--expires must be an ISO 8601 date or instant')
    expiresAt = new Date(instant).toISOString()
  }

  const file = await readTenantsFile(path, { create: true })
  let tenant = file.tenants.find((entry) => entry.id === tenantId)
  if (tenant === undefined) {
    const tier = text(values, 'tier') ?? Object.keys(file.tiers)[0]
    if (tier === undefined || file.tiers[tier] === undefined) throw new UsageError(`--tier must name a tier of ${path}`)
    tenant = { id: tenantId, tier, keys: [] }
    file.tenants.push(tenant)
  }
  const key = generateKey(kind, mode)
  const entry: KeyEntry = {
    id: keyId === undefined ? `${kind === 'secret' ? 'sk' : 'rk'}_${mode}_${hashKey(key).slice(0, 8)}` : keyId,
    kind,
    mode,
    sha256: hashKey(key),
    ...(origins.length > 0 ? { origins } : {}),
    ...(expiresAt === undefined ? {} : { expiresAt }),
    ...(workloads.length === 0 ? {} : { workloads }),
    createdAt: new Date().toISOString()
  }
  tenant.keys.push(entry)
  await writeTenantsFile(path, file, templatesDir)
  out(key)
  note(`Created ${kind} ${mode} key ${entry.id} for tenant ${tenantId} in ${path}.`)
  note('This is the only time the key is shown: store it now. Running services reload the changed file by themselves (they watch it).')
}
