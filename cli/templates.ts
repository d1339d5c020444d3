import { renderVerificationParts } from '../lib/mail/templating/message.js'
import { PARTS, type Part } from '../lib/mail/templating/liquid.js'
import { TemplateFolders } from '../lib/mail/templating/template-files.js'
import { loadTenantsFile } from './tenants.js'
import { CommandError, envValue, helpFor, parse, required, text, UsageError, type Io } from './program.js'

const previewUsage = `  email-otp templates preview --tenant ID [--locale TAG] [--code 123456] [--minutes N]
                              [--part subject|text|html] [--file PATH] [--templates DIR]`
const checkUsage = '  email-otp templates check [--file PATH] [--templates DIR]'

const files = `PATH defaults to $TENANTS_FILE, else tenants.json; DIR (the tenants' template folders,
DIR/<tenant id>/) to $TEMPLATES_DIR, else templates/ beside the tenants file.`

const help: Record<string, string> = {
  '': `Usage:
${previewUsage}
${checkUsage}
  email-otp templates [COMMAND] --help

preview renders a tenant's verification message with a sample code, as dispatch would send
it (nothing is sent); --part prints one part alone (e.g. --part html > preview.html).
check loads the tenants file with the service's own rules and lists every refused template;
it exits 1 when the file would be refused. ${files}`,
  preview: `Usage:\n${previewUsage}\n\nRenders a tenant's verification message with a sample code, as dispatch would send it\n(nothing is sent); --part prints one part alone (e.g. --part html > preview.html).\n${files}`,
  check: `Usage:\n${checkUsage}\n\nLoads the tenants file with the service's own rules and lists every refused template, each\nwith its JSON path; exits 1 when the file would be refused. ${files}`
}

/** The code a preview shows unless --code names one. */
const SAMPLE_CODE = '123456'
/** The service's default code lifetime (OTP_TTL_SECONDS), for tenants without their own. */
const DEFAULT_TTL_SECONDS = 600

export async function run (argv: string[], { out, env }: Io): Promise<void> {
  const { positionals, values } = parse(argv, {
    file: { type: 'string' },
    templates: { type: 'string' },
    tenant: { type: 'string' },
    locale: { type: 'string' },
    code: { type: 'string' },
    minutes: { type: 'string' },
    part: { type: 'string' }
  })
  const [command, extra] = positionals
  if (values.help === true || command === 'help') {
    out(helpFor(help, positionals))
    return
  }
  if (command !== 'check' && command !== 'preview') throw new UsageError(command === undefined ? 'a command is required: preview or check' : `unknown command ${command}`)
  if (extra !== undefined) throw new UsageError(`unexpected argument ${extra}`)
  const path = text(values, 'file') ?? envValue(env, 'TENANTS_FILE') ?? 'tenants.json'
  const templatesDir = text(values, 'templates') ?? envValue(env, 'TEMPLATES_DIR') ?? TemplateFolders.besideTenantsFile(path)

  if (command === 'check') {
    const registry = await loadTenantsFile(path, templatesDir, env)
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

  const tenantId = required(values, 'tenant')
  const code = text(values, 'code') ?? SAMPLE_CODE
  if (!/^[0-9]{6}$/.test(code)) throw new UsageError('--code must be 6 digits')
  let minutes: number | undefined
  const minutesOption = text(values, 'minutes')
  if (minutesOption !== undefined) {
    minutes = Number(minutesOption)
    if (!Number.isInteger(minutes) || minutes < 1 || minutes > 1440) throw new UsageError('--minutes must be a whole number from 1 to 1440')
  }
  const part = text(values, 'part')
  if (part !== undefined && !(PARTS as readonly string[]).includes(part)) throw new UsageError(`--part must be one of ${PARTS.join(', ')}`)

  const tenant = (await loadTenantsFile(path, templatesDir, env)).tenants.get(tenantId)
  if (tenant === undefined) throw new CommandError(`no tenant ${tenantId} in ${path}`)
  const { templates } = tenant
  const wanted = text(values, 'locale')
  const locale = wanted === undefined ? templates.defaultLocale : templates.match(wanted)
  if (locale === undefined) throw new CommandError(`tenant ${tenantId} has no wording in ${wanted ?? ''}; it has ${templates.locales.join(', ')}`)
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
