import { redisFailure, redisForTool } from './redis-tool.js'
import { TemplateFolders, blockListFiles, templatesRootProblem } from '../lib/mail/templating/template-files.js'
import { openRedisReputation } from '../lib/state/index.js'
import { TenantRegistry } from '../lib/tenants/registry.js'
import { describeJsonError } from '../lib/json-position.js'
import { DEFAULT_TENANTS_FILE_MAX_BYTES, readTenantsFile, registryFromFile, TenantsFileError } from '../lib/tenants-file/load.js'
import { TENANT_ID_PATTERN, TenantsFileSchema } from '../schemas/tenants.js'
import { CommandError, envValue, helpFor, parse, text, UsageError, type Io } from './program.js'

const checkUsage = '  email-otp tenants check [PATH] [--templates DIR]'
const schemaUsage = '  email-otp tenants schema'
const resumeUsage = '  email-otp tenants resume ID [--file PATH]'
const resumeHelp = `resume lifts a tenant's live sending pause (docs/reputation.md) in the service's Redis
(REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES, as for the service) and starts its
reputation window afresh; every instance stops refusing within a few seconds. Without Redis
the pause lives in the service's process, which this command cannot reach: it lifts by
itself once the window's rates fall below the thresholds (or with a restart). ID must be a
tenant of the tenants file (--file, else $TENANTS_FILE, else tenants.json): a mistyped id is
refused (exit 1) before anything is changed; a tenant that was not paused is said so.`

const help: Record<string, string> = {
  '': `Usage:
${checkUsage}
${schemaUsage}
${resumeUsage}
  email-otp tenants [COMMAND] --help

check loads the tenants file with the service's own rules (templates included) and lists
every problem of every tenant at once, each with its JSON path; it exits 1 when the service
would refuse the file or any tenant in it (a refused tenant alone does not stop the service:
the others are served). PATH defaults to $TENANTS_FILE, else tenants.json; DIR (the tenants' template folders)
to $TEMPLATES_DIR, else templates/ beside the tenants file.
schema prints the tenants file's JSON Schema (schemas/tenants.schema.json).
${resumeHelp}`,
  check: `Usage:\n${checkUsage}\n\nLoads the tenants file with the service's own rules (templates included) and lists every\nproblem of every tenant at once, each with its JSON path (e.g. /tenants/0/keys/2/sha256);\nexits 1 when the service would refuse the file or any tenant in it. PATH defaults to $TENANTS_FILE, else tenants.json; DIR to\n$TEMPLATES_DIR, else templates/ beside the tenants file.`,
  schema: `Usage:\n${schemaUsage}\n\nPrints the tenants file's JSON Schema, as published in schemas/tenants.schema.json.`,
  resume: `Usage:\n${resumeUsage}\n\n${resumeHelp[0]?.toUpperCase() ?? ''}${resumeHelp.slice(1)}`
}

/** The tenants file's JSON Schema, as published in schemas/tenants.schema.json. */
export function tenantsJsonSchema (): string {
  return JSON.stringify({ $schema: 'http://json-schema.org/draft-07/schema#', ...TenantsFileSchema }, null, 2) + '\n'
}

/** The tenants file, or some of its tenants, would be refused; `problems` says why, each on its own. */
export class CheckFailed extends CommandError {
  constructor (readonly problems: readonly string[], what = 'the tenants file') {
    super(problems.length === 1 ? `${what} would be refused: ${problems[0] ?? ''}` : `${what} would be refused (${problems.length} problems):\n${problems.map((problem) => `  ${problem}`).join('\n')}`)
  }
}

const plural = (count: number, noun: string): string => `${count} ${noun}${count === 1 ? '' : 's'}`

/** Loads the file as the service would: a refusal lists every problem, one a line. */
export async function loadTenantsFile (path: string, templatesDir: string, env: Io['env']): Promise<TenantRegistry> {
  const lists = blockListFiles((env.IP_BLOCKLISTS ?? '').split(',').map((source) => source.trim()), env.TOR_EXIT_LIST ?? null)
  // The service would not start with this folder; the file's own problems are listed with it.
  const problem = templatesRootProblem(templatesDir, { tenantsFile: path, others: lists })
  const folderProblems = problem === null ? [] : [`the templates folder ${problem}`]
  let registry: TenantRegistry
  try {
    registry = await registryFromFile(path, { templatesDir })
  } catch (error) {
    if (error instanceof TenantsFileError) throw new CheckFailed([...folderProblems, ...error.problems])
    throw error
  }
  // The service would serve the others; a refused tenant is still a problem to fix.
  const refused = [...registry.refused.values()]
  if (refused.length > 0) {
    throw new CheckFailed([...folderProblems, ...refused.flatMap((tenant) => tenant.problems)], `${plural(refused.length, 'tenant')} (${refused.map((tenant) => tenant.id).join(', ')}) of ${plural(registry.tenants.size + refused.length, 'tenant')}`)
  }
  if (folderProblems.length > 0) throw new CheckFailed(folderProblems)
  return registry
}

export async function run (argv: string[], { out, env }: Io): Promise<void> {
  const { positionals, values } = parse(argv, { templates: { type: 'string' }, file: { type: 'string' } })
  const [command, argument, extra] = positionals
  if (values.help === true || command === 'help') {
    out(helpFor(help, positionals))
    return
  }
  if (values.file !== undefined && command !== 'resume') throw new UsageError('--file is for resume (check takes the file as PATH)')
  if (command === 'schema') {
    if (argument !== undefined) throw new UsageError(`unexpected argument ${argument}`)
    out(tenantsJsonSchema().trimEnd())
    return
  }
  if (command === 'resume') {
    if (argument === undefined) throw new UsageError('resume needs the tenant id')
    if (extra !== undefined) throw new UsageError(`unexpected argument ${extra}`)
    await resume(argument, text(values, 'file') ?? envValue(env, 'TENANTS_FILE') ?? 'tenants.json', env, out)
    return
  }
  if (command !== 'check') throw new UsageError(command === undefined ? 'a command is required: check, schema or resume' : `unknown command ${command}`)
  if (extra !== undefined) throw new UsageError(`unexpected argument ${extra}`)
  const path = argument ?? envValue(env, 'TENANTS_FILE') ?? 'tenants.json'
  const templatesDir = text(values, 'templates') ?? envValue(env, 'TEMPLATES_DIR') ?? TemplateFolders.besideTenantsFile(path)
  const registry = await loadTenantsFile(path, templatesDir, env)
  out(`${path}: no problems (${plural(registry.tenants.size, 'tenant')})`)
}

/** Lifts the tenant's pause in the service's Redis and forgets its window's counts. */
async function resume (tenantId: string, tenantsFile: string, env: Io['env'], out: Io['out']): Promise<void> {
  if (!new RegExp(TENANT_ID_PATTERN).test(tenantId)) throw new UsageError('resume needs a tenant id (lower-case letters, digits, - and _)')
  const config = redisForTool(env, 'without Redis (REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES) a pause lives in the service\'s own process, which this command cannot reach: it lifts by itself once the window\'s rates fall below the thresholds, or when the service restarts')
  const known = await tenantIds(tenantsFile)
  if (!known.has(tenantId)) throw new CommandError(`${tenantId} is not a tenant of ${tenantsFile} (--file or TENANTS_FILE names another): nothing was resumed`)
  const { reputation, close } = openRedisReputation(config.redis, config.reputationWindowMs)
  try {
    const lifted = await reputation.resume(tenantId, { forget: true, nowMs: Date.now() }).catch((error: unknown) => {
      throw redisFailure(config, error)
    })
    const since = lifted?.unreadable === undefined ? `paused since ${new Date(lifted?.sinceMs ?? 0).toISOString()}` : `its stored pause could not be read, ${lifted.unreadable}, and was removed`
    out(lifted === null
      ? `${tenantId}: live sending was not paused; its reputation window starts afresh`
      : `${tenantId}: live sending resumed (${since}); its reputation window starts afresh, and every instance sends again within a few seconds`)
  } finally {
    close()
  }
}

/**
 * The tenant ids the file lists, read without the service's other checks: a tenant refused for
 * a broken template is still one whose pause an operator may lift.
 */
async function tenantIds (path: string): Promise<Set<string>> {
  let source: string
  try {
    source = await readTenantsFile(path, DEFAULT_TENANTS_FILE_MAX_BYTES)
  } catch (error) {
    if (error instanceof TenantsFileError) throw new CommandError(`${error.message} (--file or TENANTS_FILE names the service's tenants file)`)
    throw error
  }
  let document: unknown
  try {
    document = JSON.parse(source)
  } catch (error) {
    throw new CommandError(`tenants file ${path} is not valid JSON: ${describeJsonError(source, error)}`)
  }
  const tenants = (document as { tenants?: unknown } | null)?.tenants
  return new Set(Array.isArray(tenants) ? tenants.flatMap((tenant) => typeof (tenant as { id?: unknown } | null)?.id === 'string' ? [(tenant as { id: string }).id] : []) : [])
}
