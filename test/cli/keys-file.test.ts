/*
 * `email-otp keys` and the tenants file as a user meets them: the program run from its sources
 * in a directory of the user's, with TENANTS_FILE unset. A file that does not exist is an
 * error (create makes it); without --file nor TENANTS_FILE every command reads tenants.json,
 * as templates and tenants do; a bad option value is the command line's problem, named by its
 * option, never a JSON path of the file; and the CLI tells what the docs tell of a reload.
 */
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { execForTest as exec } from '../support/processes.js'

const main = new URL('../../cli/main.ts', import.meta.url).pathname

interface Outcome { code: number, stdout: string, stderr: string }

/** `email-otp <argv>` in `cwd`, as `npx email-otp` runs the built program, from the sources. */
async function emailOtp (cwd: string, argv: string[], env: Record<string, string> = {}): Promise<Outcome> {
  try {
    const { stdout, stderr } = await exec(process.execPath, ['--import', 'tsx', main, ...argv], { cwd, env: { PATH: process.env.PATH ?? '', ...env }, timeout: 120_000 })
    return { code: 0, stdout, stderr }
  } catch (error) {
    const failed = error as Outcome
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr }
  }
}

t.test('a tenants file that does not exist: exit 1, one line naming it; only create makes it', async (t) => {
  const dir = t.testdir({})
  const missing = join(dir, 'missing.json')
  const refusal = `email-otp keys: ${missing} does not exist (keys create makes it; --file or TENANTS_FILE names another)\n`
  for (const argv of [['list'], ['revoke', '--tenant', 'acme', '--id', 'k1'], ['workloads', '--tenant', 'acme', '--id', 'k1'], ['review', '--tenant', 'acme', '--address', 'review@acme.test']]) {
    t.same(await emailOtp(dir, ['keys', ...argv, '--file', missing]), { code: 1, stdout: '', stderr: refusal }, `keys ${argv[0] ?? ''}`)
  }
  t.same(await emailOtp(dir, ['keys', 'list'], { TENANTS_FILE: missing }), { code: 1, stdout: '', stderr: refusal }, 'named by TENANTS_FILE too')
  t.notOk(existsSync(missing), 'nothing was created')
  const created = await emailOtp(dir, ['keys', 'create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'test', '--file', missing])
  t.equal(created.code, 0)
  t.ok(existsSync(missing), 'create makes the file')
})

t.test('without --file nor TENANTS_FILE, keys reads and writes tenants.json, the file templates and tenants check', async (t) => {
  const dir = t.testdir({})
  t.same(await emailOtp(dir, ['keys', 'list']), { code: 1, stdout: '', stderr: 'email-otp keys: tenants.json does not exist (keys create makes it; --file or TENANTS_FILE names another)\n' })
  const created = await emailOtp(dir, ['keys', 'create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'live', '--id', 'first'])
  t.equal(created.code, 0, created.stderr)
  t.match(created.stderr, /^Created secret live key first for tenant acme in tenants\.json\.\n/)
  t.ok(existsSync(join(dir, 'tenants.json')), 'in the working directory')
  t.same(await emailOtp(dir, ['keys', 'list']), { code: 0, stdout: 'acme\tfirst\tsecret\tlive\tactive\n', stderr: '' })
  t.same(await emailOtp(dir, ['tenants', 'check']), { code: 0, stdout: 'tenants.json: no problems (1 tenant)\n', stderr: '' }, 'tenants check reads the same file')
  t.match(await emailOtp(dir, ['templates', 'check']), { code: 0, stdout: /^acme\t[^\n]*\ntenants\.json: every template passes\n$/ }, 'and so does templates check')
})

t.test('a bad option value is a usage error naming the option (exit 2), never a JSON path; the file is left as it was', async (t) => {
  const dir = t.testdir({})
  t.equal((await emailOtp(dir, ['keys', 'create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'live', '--id', 'first'])).code, 0)
  const before = readFileSync(join(dir, 'tenants.json'), 'utf8')
  const usage = (line: string): Outcome => ({ code: 2, stdout: '', stderr: `email-otp keys: ${line} (email-otp keys --help shows the usage)\n` })
  t.same(await emailOtp(dir, ['keys', 'create', '--tenant', 'Acme!', '--kind', 'secret', '--mode', 'live']),
    usage('--tenant "Acme!" is not a tenant id (1 to 63 lower-case letters, digits, - and _, starting with a letter or digit)'))
  t.same(await emailOtp(dir, ['keys', 'review', '--tenant', 'acme', '--address', 'not an address']),
    usage('--address "not an address" is not an acceptable address: email must not contain comments or whitespace'))
  t.same(await emailOtp(dir, ['keys', 'create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'live', '--id', 'my key']),
    usage('--id "my key" is not a key id (1 to 64 letters, digits, - and _)'))
  t.same(await emailOtp(dir, ['keys', 'create', '--tenant', 'acme', '--kind', 'restricted', '--mode', 'live', '--origin', 'https://app.acme.test/login']),
    usage('--origin "https://app.acme.test/login" is not a host (app.example.com, *.example.com) or an exact origin (http://localhost:5173)'))
  t.same(await emailOtp(dir, ['keys', 'revoke', '--tenant', 'acme!', '--id', 'first']),
    usage('--tenant "acme!" is not a tenant id (1 to 63 lower-case letters, digits, - and _, starting with a letter or digit)'))
  t.equal(readFileSync(join(dir, 'tenants.json'), 'utf8'), before, 'the file is unchanged')
})

t.test('the CLI and docs/keys.md agree: running services reload the changed file by themselves', async (t) => {
  const dir = t.testdir({})
  const docs = readFileSync(new URL('../../docs/keys.md', import.meta.url), 'utf8')
  t.match(docs, /the service reloads the file by itself when it changes \(it watches\s+the file's folder/, 'the docs say the file is watched')
  const created = await emailOtp(dir, ['keys', 'create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'live'])
  t.match(created.stderr, /Running services reload the changed file by themselves \(they watch it\)\.\n$/, 'create says so')
  const review = await emailOtp(dir, ['keys', 'review', '--tenant', 'acme', '--address', 'review@acme.test'])
  t.match(review.stderr, /Running services reload the changed file by themselves \(they watch it\)\.\n$/, 'review says so')
  for (const topic of [[], ['create'], ['revoke'], ['review']]) {
    const help = await emailOtp(dir, ['keys', ...topic, '--help'])
    t.match(help.stdout, /reload the\s+changed\s+file\s+by\s+themselves\s+\(they\s+watch\s+it/, `keys ${topic.join(' ')} --help says so`)
    t.notMatch(help.stdout, /Send SIGHUP/, 'and sends nobody to signal the service')
  }
  t.notMatch(created.stderr + review.stderr, /SIGHUP/)
})
