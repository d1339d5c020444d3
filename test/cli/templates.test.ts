import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { run } from '../../cli/templates.js'
import { CheckFailed } from '../../cli/tenants.js'
import { writeTenants } from '../helper.js'
import { killOnExit } from '../support/processes.js'

const CLI = fileURLToPath(new URL('../../cli/main.ts', import.meta.url))

async function cli (args: string[]): Promise<string[]> {
  const lines: string[] = []
  await run(args, { out: (line) => { lines.push(line) }, note: () => {}, env: {} })
  return lines
}

/** The CLI as an operator runs it: a process, its output and its exit code. */
async function processRun (args: string[]): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const child = killOnExit(spawn(process.execPath, ['--import', 'tsx', CLI, 'templates', ...args], { stdio: ['ignore', 'pipe', 'pipe'] }))
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const [code] = await once(child, 'exit') as [number | null]
  return { code, stdout, stderr }
}

function brandedFile (t: Test): string {
  t.testdir({ templates: { acme: { mail: { 'fr.html': '<p lang="{{ locale }}">{{ brand }} : <b>{{ code }}</b> ({{ minutes }} min)</p>' } } } })
  return writeTenants(t, (file) => {
    file.tenants[0]!.ttlSeconds = 300
    file.tenants[0]!.templates = { fr: { subject: 'Connexion à {{ brand }}', html: { file: 'mail/fr.html' } } }
  }).path
}

t.test('preview prints a tenant\'s message as dispatch would render it', async (t) => {
  const path = brandedFile(t)
  const lines = await cli(['preview', '--tenant', 'acme', '--locale', 'fr-CA', '--file', path])
  t.same(lines.slice(0, 3), [
    'Tenant:  acme',
    'Locale:  fr (subject: own template, text: built-in, html: own template)',
    'Subject: Connexion à Acme'
  ])
  const output = lines.join('\n')
  t.match(output, '----- text -----\nVotre code de vérification Acme est 123456.\n\nIl expire dans 5 minutes.', 'the built-in text, with the tenant\'s lifetime')
  t.match(output, '----- html -----\n<p lang="fr">Acme : <b>123456</b> (5 min)</p>')

  t.same(await cli(['preview', '--tenant', 'acme', '--locale', 'fr', '--code', '042917', '--minutes', '15', '--part', 'html', '--file', path]), ['<p lang="fr">Acme : <b>042917</b> (15 min)</p>'], 'one part alone')
  t.match((await cli(['preview', '--tenant', 'globex', '--file', path])).join('\n'), 'Subject: Your globex verification code', 'a tenant without templates: the built-in wording')

  await t.rejects(cli(['preview', '--tenant', 'acme', '--locale', 'ja', '--file', path]), /tenant acme has no wording in ja; it has en, fr, de, es/)
  await t.rejects(cli(['preview', '--tenant', 'nobody', '--file', path]), /no tenant nobody/)
  await t.rejects(cli(['preview', '--tenant', 'acme', '--code', '12', '--file', path]), /--code must be 6 digits/)
  await t.rejects(cli(['preview', '--tenant', 'acme', '--part', 'footer', '--file', path]), /--part must be one of subject, text, html/)
  await t.rejects(cli(['preview', '--file', path]), /--tenant is required/)
})

t.test('template files are read from TEMPLATES_DIR/<tenant id>/ (--templates), never from the tenants file\'s folder', async (t) => {
  const path = brandedFile(t)
  const elsewhere = join(t.testdirName, 'elsewhere')
  mkdirSync(join(elsewhere, 'acme', 'mail'), { recursive: true })
  writeFileSync(join(elsewhere, 'acme', 'mail', 'fr.html'), '<i>{{ code }}</i>')
  t.same(await cli(['preview', '--tenant', 'acme', '--locale', 'fr', '--part', 'html', '--file', path, '--templates', elsewhere]), ['<i>123456</i>'])
  const lines: string[] = []
  await run(['preview', '--tenant', 'acme', '--locale', 'fr', '--part', 'html', '--file', path], { out: (line) => { lines.push(line) }, note: () => {}, env: { TEMPLATES_DIR: elsewhere } })
  t.same(lines, ['<i>123456</i>'], 'TEMPLATES_DIR as the service reads it')
  await t.rejects(cli(['check', '--file', path, '--templates', t.testdirName]), /the templates folder .* must not be or contain the tenants file's folder/)
})

t.test('check lists every refused template and exits 1; a good file exits 0', async (t) => {
  const path = brandedFile(t)
  t.same(await cli(['check', '--file', path]), [
    'acme\tdefault en\town templates: fr (subject, html)',
    'globex\tdefault en\tbuilt-in wording only',
    `${path}: every template passes`
  ])
  const good = await processRun(['check', '--file', path])
  t.equal(good.code, 0)

  const broken = writeTenants(t, (file) => {
    file.tenants[0]!.templates = { en: { subject: 'Code {{ code }}', html: '{% for i in (1..100000000) %}{{ code }}{% endfor %}' } }
    file.tenants[1]!.templates = { de: { text: { file: '../outside.liquid' } } }
  }).path
  const error = await cli(['check', '--file', broken]).then(() => null, (thrown: unknown) => thrown)
  t.type(error, CheckFailed)
  t.same((error as CheckFailed).problems.map((problem) => problem.replace(/:.*/, '')), [
    '/tenants/0/templates/en/subject (tenant acme, locale en, subject)',
    '/tenants/0/templates/en/html (tenant acme, locale en, html)',
    '/tenants/1/templates/de/text (tenant globex, locale de, text)'
  ])
  const refused = await processRun(['check', '--file', broken])
  t.equal(refused.code, 1, 'exits 1')
  t.match(refused.stderr, /2 tenants \(acme, globex\) of 2 tenants would be refused \(3 problems\):\n {2}\/tenants\/0\/templates\/en\/subject \(tenant acme, locale en, subject\): the subject must not contain the code/)
  t.match(refused.stderr, /\/tenants\/0\/templates\/en\/html .*allocates more than the limit/)
  t.match(refused.stderr, /\/tenants\/1\/templates\/de\/text .*file "..\/outside.liquid" leaves the tenant's template folder .*\/templates\/globex\/: a path may not contain "\.\."/)
  t.equal(refused.stdout, '')

  const unreadable = await processRun(['check', '--file', `${t.testdirName}/missing.json`])
  t.equal(unreadable.code, 1)
  t.match(unreadable.stderr, /cannot be read: ENOENT/)
  const usage = await processRun(['frobnicate'])
  t.equal(usage.code, 2)
  t.equal(usage.stderr, 'email-otp templates: unknown command frobnicate (email-otp templates --help shows the usage)\n')
})
