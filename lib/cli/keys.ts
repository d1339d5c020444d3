import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { readFile, rename, writeFile } from 'node:fs/promises'
import { parseArgs } from 'node:util'
import { TemplateFolders } from '../mail/template-files.js'
import { generateKey, hashKey, type KeyKind, type KeyMode } from '../tenants/api-keys.js'
import { generateCode } from '../otp/codes.js'
import { REVIEW_ADDRESS_MAX_DAYS, TenantRegistry } from '../tenants/registry.js'
import type { KeyEntry, TenantsFile } from '../../schemas/tenants.js'

const usage = `Usage:
  npm run keys -- create --tenant ID --kind secret|restricted --mode live|test [--file PATH]
                         [--origin HOST]... [--expires ISO-8601] [--tier NAME] [--id KEY_ID]
                         [--templates DIR]
  npm run keys -- revoke --tenant ID --id KEY_ID [--file PATH] [--templates DIR]
  npm run keys -- list [--file PATH]
  npm run keys -- review --tenant ID --address EMAIL [--days 1-90] [--file PATH] [--templates DIR]
  npm run keys -- --help

--file defaults to $TENANTS_FILE, the file the service reads; --templates (the tenants'
template folders, read to check the file as the service would) to $TEMPLATES_DIR, else
templates/ beside the tenants file.
create prints the new key once on stdout and writes only its SHA-256 to the file (created
if missing; a missing tenant is added on the given or first tier); the key's id (for
revoke) is on stderr and in list. review gives the tenant's review address (for app-store
reviewers and end-to-end tests: no mail, no charge) a new random code, valid --days (default
30, at most 90): the code is printed once, the file keeps only its SHA-256. Send SIGHUP to the
service to load the change.`

class UsageError extends Error {}

const DEFAULT_TIERS: TenantsFile['tiers'] = {
  standard: { allowance: 10000, window: 'month', sandboxAllowance: 1000 }
}

async function readTenantsFile (path: string): Promise<TenantsFile> {
  if (!existsSync(path)) return { tiers: structuredClone(DEFAULT_TIERS), tenants: [] }
  return JSON.parse(await readFile(path, 'utf8')) as TenantsFile
}

/** Validates with the service's own rules (template files included), then replaces the file atomically. */
async function writeTenantsFile (path: string, file: TenantsFile, templatesDir: string): Promise<void> {
  TenantRegistry.fromJson(file, { templateFolders: new TemplateFolders(templatesDir, path) })
  const temporary = `${path}.${process.pid}.tmp`
  await writeFile(temporary, JSON.stringify(file, null, 2) + '\n', { mode: 0o600 })
  await rename(temporary, path)
}

function option (values: Record<string, unknown>, name: string): string {
  const value = values[name]
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`)
  return value
}

function oneOf<T extends string> (values: Record<string, unknown>, name: string, allowed: readonly T[]): T {
  const value = option(values, name)
  if (!(allowed as readonly string[]).includes(value)) throw new UsageError(`--${name} must be one of ${allowed.join(', ')}`)
  return value as T
}

export async function run (argv: string[], out: (line: string) => void, env: Readonly<Record<string, string | undefined>> = {}): Promise<void> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      tenant: { type: 'string' },
      kind: { type: 'string' },
      mode: { type: 'string' },
      file: { type: 'string' },
      templates: { type: 'string' },
      origin: { type: 'string', multiple: true },
      expires: { type: 'string' },
      tier: { type: 'string' },
      id: { type: 'string' },
      address: { type: 'string' },
      days: { type: 'string' },
      help: { type: 'boolean', short: 'h' }
    }
  })
  const command = positionals[0]
  if (values.help === true || command === 'help') {
    out(usage)
    return
  }
  const fromEnv = env.TENANTS_FILE
  const path = values.file ?? (fromEnv === undefined || fromEnv === '' ? undefined : fromEnv)
  if (path === undefined || path === '') throw new UsageError('--file is required (or set TENANTS_FILE)')
  const templatesDir = values.templates ?? (env.TEMPLATES_DIR === undefined || env.TEMPLATES_DIR === '' ? TemplateFolders.besideTenantsFile(path) : env.TEMPLATES_DIR)

  if (command === 'list') {
    const file = await readTenantsFile(path)
    for (const tenant of file.tenants) {
      for (const key of tenant.keys) {
        const state = key.revoked === true ? 'revoked' : key.expiresAt !== undefined && Date.parse(key.expiresAt) <= Date.now() ? 'expired' : 'active'
        out(`${tenant.id}\t${key.id}\t${key.kind}\t${key.mode}\t${state}${key.expiresAt === undefined ? '' : `\texpires ${key.expiresAt}`}`)
      }
    }
    return
  }

  if (command === 'revoke') {
    const file = await readTenantsFile(path)
    const tenantId = option(values, 'tenant')
    const keyId = option(values, 'id')
    const key = file.tenants.find((tenant) => tenant.id === tenantId)?.keys.find((entry) => entry.id === keyId)
    if (key === undefined) throw new UsageError(`no key ${keyId} for tenant ${tenantId}`)
    key.revoked = true
    await writeTenantsFile(path, file, templatesDir)
    out(`revoked ${tenantId}/${keyId}`)
    return
  }

  if (command === 'review') {
    const file = await readTenantsFile(path)
    const tenantId = option(values, 'tenant')
    const address = option(values, 'address')
    const days = values.days === undefined ? 30 : Number(values.days)
    if (!Number.isInteger(days) || days < 1 || days > REVIEW_ADDRESS_MAX_DAYS) throw new UsageError(`--days must be a whole number from 1 to ${REVIEW_ADDRESS_MAX_DAYS}`)
    const tenant = file.tenants.find((entry) => entry.id === tenantId)
    if (tenant === undefined) throw new UsageError(`no tenant ${tenantId}`)
    const code = generateCode()
    const entry = { address, codeSha256: createHash('sha256').update(code).digest('hex'), expiresAt: new Date(Date.now() + days * 86_400_000).toISOString() }
    // One entry per address: a new code replaces the old one.
    tenant.reviewAddresses = [...(tenant.reviewAddresses ?? []).filter((existing) => existing.address.toLowerCase() !== address.toLowerCase()), entry]
    await writeTenantsFile(path, file, templatesDir)
    out(code)
    process.stderr.write(`Review address ${address} of tenant ${tenantId} has a new code, valid until ${entry.expiresAt}.\n` +
      'This is the only time the code is shown. Send SIGHUP to running services to load it.\n')
    return
  }

  if (command !== 'create') throw new UsageError(command === undefined ? 'a command is required' : `unknown command ${command}`)
  const tenantId = option(values, 'tenant')
  const kind = oneOf<KeyKind>(values, 'kind', ['secret', 'restricted'])
  const mode = oneOf<KeyMode>(values, 'mode', ['live', 'test'])
  const origins = values.origin ?? []
  if (kind === 'restricted' && origins.length === 0) throw new UsageError('a restricted key needs at least one --origin')
  if (kind === 'secret' && origins.length > 0) throw new UsageError('--origin is only for restricted keys')
  let expiresAt: string | undefined
  if (values.expires !== undefined) {
    const instant = Date.parse(values.expires)
    if (Number.isNaN(instant)) throw new UsageError('--expires must be an ISO 8601 date or instant')
    expiresAt = new Date(instant).toISOString()
  }

  const file = await readTenantsFile(path)
  let tenant = file.tenants.find((entry) => entry.id === tenantId)
  if (tenant === undefined) {
    const tier = values.tier ?? Object.keys(file.tiers)[0]
    if (tier === undefined || file.tiers[tier] === undefined) throw new UsageError(`--tier must name a tier of ${path}`)
    tenant = { id: tenantId, tier, keys: [] }
    file.tenants.push(tenant)
  }
  const key = generateKey(kind, mode)
  const entry: KeyEntry = {
    id: values.id ?? `${kind === 'secret' ? 'sk' : 'rk'}_${mode}_${hashKey(key).slice(0, 8)}`,
    kind,
    mode,
    sha256: hashKey(key),
    ...(origins.length > 0 ? { origins } : {}),
    ...(expiresAt === undefined ? {} : { expiresAt }),
    createdAt: new Date().toISOString()
  }
  tenant.keys.push(entry)
  await writeTenantsFile(path, file, templatesDir)
  out(key)
  process.stderr.write(`Created ${kind} ${mode} key ${entry.id} for tenant ${tenantId} in ${path}.\n` +
    'This is the only time the key is shown: store it now. Send SIGHUP to running services to load it.\n')
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))
if (invokedDirectly) {
  run(process.argv.slice(2), (line) => { process.stdout.write(line + '\n') }, process.env).catch((error: unknown) => {
    process.stderr.write(`keys: ${error instanceof Error ? error.message : String(error)}\n`)
    if (error instanceof UsageError || (error as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') process.stderr.write(`\n${usage}\n`)
    process.exitCode = 1
  })
}
