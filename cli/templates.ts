import { parseArgs } from 'node:util'
import { renderVerificationParts } from '../mail/compose.js'
import { PARTS, type Part } from '../mail/liquid.js'
import { TemplateFolders, blockListFiles, templatesRootProblem } from '../mail/template-files.js'
import { TenantRegistry, TenantsFileError } from '../tenants/registry.js'

const usage = `Usage:
  npm run templates -- preview --tenant ID [--locale TAG] [--code 123456] [--minutes N]
                               [--part subject|text|html] [--file PATH] [--templates DIR]
  npm run templates -- check [--file PATH] [--templates DIR]

preview renders a tenant's verification message with a sample code, as dispatch would send
it (nothing is sent); --part prints one part alone (e.g. --part html > preview.html).
check loads the tenants file with the service's own rules and lists every refused template;
it exits 1 when the file would be refused. PATH defaults to $TENANTS_FILE, else tenants.json;
DIR (the tenants' template folders, DIR/<tenant id>/) to $TEMPLATES_DIR, else templates/
beside the tenants file.`

class UsageError extends Error {}

/** The code a preview shows unless --code names one. */
const SAMPLE_CODE = '123456'
/** The service's default code lifetime (OTP_TTL_SECONDS), for tenants without their own. */
const DEFAULT_TTL_SECONDS = 600

function option (values: Record<string, unknown>, name: string): string {
  const value = values[name]
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`)
  return value
}

/** Loads the file as the service would: a refusal lists every problem, one a line. */
async function load (path: string, templatesDir: string, env: Readonly<Record<string, string | undefined>>): Promise<TenantRegistry> {
  const lists = blockListFiles((env.IP_BLOCKLISTS ?? '').split(',').map((source) => source.trim()), env.TOR_EXIT_LIST ?? null)
  const problem = templatesRootProblem(templatesDir, { tenantsFile: path, others: lists })
  if (problem !== null) throw new UsageError(`the templates folder ${problem}`)
  try {
    return await TenantRegistry.fromFile(path, { templatesDir })
  } catch (error) {
    if (error instanceof TenantsFileError) throw new CheckFailed(error.problems)
    throw error
  }
}

/** The tenants file would be refused; `problems` says why, each on its own. */
export class CheckFailed extends Error {
  constructor (readonly problems: readonly string[]) {
    super(`the tenants file would be refused:\n${problems.map((problem) => `  ${problem}`).join('\n')}`)
    this.name = 'CheckFailed'
  }
}

export async function run (argv: string[], out: (line: string) => void, env: Readonly<Record<string, string | undefined>> = {}): Promise<void> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      file: { type: 'string', default: env.TENANTS_FILE === undefined || env.TENANTS_FILE === '' ? 'tenants.json' : env.TENANTS_FILE },
      templates: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
      tenant: { type: 'string' },
      locale: { type: 'string' },
      code: { type: 'string' },
      minutes: { type: 'string' },
      part: { type: 'string' }
    }
  })
  const command = positionals[0]
  if (values.help === true || command === 'help') {
    out(usage)
    return
  }
  const path = option(values, 'file')
  const templatesDir = values.templates ?? (env.TEMPLATES_DIR === undefined || env.TEMPLATES_DIR === '' ? TemplateFolders.besideTenantsFile(path) : env.TEMPLATES_DIR)

  if (command === 'check') {
    const registry = await load(path, templatesDir, env)
    for (const tenant of registry.tenants.values()) {
      const own = tenant.templates.locales
        .map((locale) => ({ locale, parts: tenant.templates.customParts(locale) }))
        .filter(({ parts }) => parts.length > 0)
        .map(({ locale, parts }) => `${locale} (${parts.join(', ')})`)
      out(`${tenant.id}\tdefault ${tenant.templates.defaultLocale}\t${own.length === 0 ? 'built-in wording only' : `own templates: ${own.join(', ')}`}`)
    }
    out(`${path}: every template passes`)
    return
  }

  if (command !== 'preview') throw new UsageError(command === undefined ? 'a command is required' : `unknown command ${command}`)
  const tenantId = option(values, 'tenant')
  const code = values.code ?? SAMPLE_CODE
  if (!/^[0-9]{6}$/.test(code)) throw new UsageError('--code must be 6 digits')
  let minutes: number | undefined
  if (values.minutes !== undefined) {
    minutes = Number(values.minutes)
    if (!Number.isInteger(minutes) || minutes < 1 || minutes > 1440) throw new UsageError('--minutes must be a whole number from 1 to 1440')
  }
  const part = values.part
  if (part !== undefined && !(PARTS as readonly string[]).includes(part)) throw new UsageError(`--part must be one of ${PARTS.join(', ')}`)

  const tenant = (await load(path, templatesDir, env)).tenants.get(tenantId)
  if (tenant === undefined) throw new UsageError(`no tenant ${tenantId} in ${path}`)
  const { templates } = tenant
  const locale = values.locale === undefined ? templates.defaultLocale : templates.match(values.locale)
  if (locale === undefined) throw new UsageError(`tenant ${tenantId} has no wording in ${values.locale ?? ''}; it has ${templates.locales.join(', ')}`)
  let fallback = ''
  const rendered = renderVerificationParts({
    templates,
    locale,
    brand: tenant.brandName,
    code,
    ttlSeconds: minutes === undefined ? tenant.ttlSeconds ?? DEFAULT_TTL_SECONDS : minutes * 60,
    onTemplateFallback: (problem) => { fallback = `${problem.locale}/${problem.part}: ${problem.rule}` }
  })
  if (part !== undefined) {
    out(rendered[part as Part])
    return
  }
  const own = templates.customParts(rendered.locale)
  out(`Tenant:  ${tenant.id}`)
  out(`Locale:  ${rendered.locale} (${PARTS.map((name) => `${name}: ${own.includes(name) ? 'own template' : 'built-in'}`).join(', ')})`)
  if (fallback !== '') out(`Warning: the built-in wording was rendered instead: ${fallback}`)
  out(`Subject: ${rendered.subject}`)
  out('')
  out('----- text -----')
  out(rendered.text.trimEnd())
  out('----- html -----')
  out(rendered.html.trimEnd())
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))
if (invokedDirectly) {
  run(process.argv.slice(2), (line) => { process.stdout.write(line + '\n') }, process.env).catch((error: unknown) => {
    process.stderr.write(`templates: ${error instanceof Error ? error.message : String(error)}\n`)
    if (error instanceof UsageError || (error as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') process.stderr.write(`\n${usage}\n`)
    process.exitCode = 1
  })
}
