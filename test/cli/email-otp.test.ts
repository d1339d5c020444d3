/*
 * One program, `email-otp <command>`: declared in package.json `bin` (built to dist/ by
 * `npm run build`), run from the sources by `npm run email-otp` and the per-command scripts.
 * Every command and subcommand answers --help; every error is one line and a non-zero exit.
 */
import { readFileSync } from 'node:fs'
import t from 'tap'
import { tenantsJsonSchema } from '../../cli/tenants.js'
import { execForTest as exec } from '../support/processes.js'

const root = new URL('../..', import.meta.url).pathname
const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { bin: Record<string, string>, scripts: Record<string, string> }

interface Outcome { code: number, stdout: string, stderr: string }

/** The program as a process, from the sources (what the bin runs once built). */
async function program (args: string[]): Promise<Outcome> {
  try {
    const { stdout, stderr } = await exec(process.execPath, ['--import', 'tsx', 'cli/main.ts', ...args], { cwd: root, env: { ...process.env, TENANTS_FILE: '', TEMPLATES_DIR: '', REDIS_URL: '' }, timeout: 60_000 })
    return { code: 0, stdout, stderr }
  } catch (error) {
    const failed = error as Outcome
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr }
  }
}

t.test('package.json declares the program and the scripts that run it from the sources', async (t) => {
  t.same(manifest.bin, { 'email-otp': 'dist/cli/main.js' })
  t.match(readFileSync(new URL('../../cli/main.ts', import.meta.url), 'utf8'), /^#!\/usr\/bin\/env node\n/, 'executable once built (tsc keeps the line)')
  const build = JSON.parse(readFileSync(new URL('../../tsconfig.build.json', import.meta.url), 'utf8')) as { include: string[] }
  t.ok(build.include.includes('cli'), 'npm run build compiles cli/ to dist/cli/')
  t.equal(manifest.scripts['email-otp'], 'node --import tsx cli/main.ts')
  for (const command of ['keys', 'templates', 'tenants', 'webhooks']) {
    t.equal(manifest.scripts[command], `node --import tsx cli/main.ts ${command}`, `npm run ${command} -- … runs email-otp ${command} without a build`)
  }
})

t.test('--help of the program lists the commands; no command or an unknown one is one line, exit 2', async (t) => {
  const help = await program(['--help'])
  t.equal(help.code, 0)
  t.match(help.stdout, /^Usage:\n {2}email-otp <command> \[arguments\]\n/)
  for (const command of ['keys', 'templates', 'tenants', 'webhooks']) t.match(help.stdout, new RegExp(`\\n {2}${command} +\\S`), `lists ${command}`)
  t.same(await program([]), { code: 2, stdout: '', stderr: 'email-otp: a command is required (email-otp --help lists them)\n' })
  t.same(await program(['rotate']), { code: 2, stdout: '', stderr: 'email-otp: unknown command rotate (email-otp --help lists them)\n' })
  t.same(await program(['__proto__']), { code: 2, stdout: '', stderr: 'email-otp: unknown command __proto__ (email-otp --help lists them)\n' }, 'only its own commands')
})

t.test('every command and subcommand answers --help with its usage, exit 0', async (t) => {
  const topics = [
    ['keys'], ['keys', 'create'], ['keys', 'revoke'], ['keys', 'list'],
    ['templates'], ['templates', 'preview'], ['templates', 'check'],
    ['tenants'], ['tenants', 'check'], ['tenants', 'schema'],
    ['webhooks'], ['webhooks', 'dead-letters'], ['webhooks', 'dead-letters', 'list'], ['webhooks', 'dead-letters', 'replay'], ['webhooks', 'schema']
  ]
  for (const topic of topics) {
    const answer = await program([...topic, '--help'])
    t.equal(answer.code, 0, `${topic.join(' ')} --help succeeds`)
    t.match(answer.stdout, new RegExp(`^Usage:\\n {2}email-otp ${topic.join(' ')}[ \\n]`), `${topic.join(' ')} --help shows its own usage first`)
    t.equal(answer.stderr, '')
  }
})

t.test('tenants schema prints the published JSON Schema', async (t) => {
  const answer = await program(['tenants', 'schema'])
  t.equal(answer.stdout, tenantsJsonSchema())
  t.equal(tenantsJsonSchema(), readFileSync(new URL('../../schemas/tenants.schema.json', import.meta.url), 'utf8'))
})
