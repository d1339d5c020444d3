/*
 * The keys CLI as a newcomer meets it: through `npm run keys`, without a build, with --help,
 * with the tenants file taken from TENANTS_FILE, and with the example ids of docs/keys.md.
 * Those runs go through npm as typed; the other cases run the same program in this process.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { runCli } from '../support/cli.js'
import { execForTest as exec } from '../support/processes.js'

const root = new URL('../..', import.meta.url).pathname
const npmKeys = async (args: string[], env: Record<string, string> = {}): Promise<{ stdout: string, stderr: string }> =>
  await exec('npm', ['run', '-s', 'keys', '--', ...args], { cwd: root, env: { ...process.env, TENANTS_FILE: '', TEMPLATES_DIR: '', ...env }, timeout: 60_000 })
/** The same program in this process. */
const keys = async (args: string[], env: Record<string, string> = {}): Promise<{ stdout: string, stderr: string }> =>
  await runCli(['keys', ...args], { ...process.env, TENANTS_FILE: '', TEMPLATES_DIR: '', ...env })

t.test('npm run keys does not build the project', async (t) => {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  t.notMatch(manifest.scripts.keys, /build|tsc/)
})

t.test('--help answers the usage and succeeds', async (t) => {
  const { stdout } = await npmKeys(['--help'])
  t.match(stdout, /^Usage:\n {2}email-otp keys create/)
  t.match(stdout, /--file defaults to \$TENANTS_FILE/)
  for (const command of ['create', 'revoke', 'list']) {
    t.match((await keys([command, '--help'])).stdout, new RegExp(`^Usage:\\n {2}email-otp keys ${command} `), `${command} --help`)
  }
})

t.test('errors are one line and a non-zero exit', async (t) => {
  const dir = t.testdir({ 'broken.json': '{"tiers": ', 'other.json': '[1, 2]' })
  const failure = async (args: string[]): Promise<{ code: number, stderr: string }> => await keys(args).then(() => ({ code: 0, stderr: '' }), (error: { code: number, stderr: string }) => ({ code: error.code, stderr: error.stderr }))
  t.same(await failure(['list', '--nope', '--file', join(dir, 'broken.json')]), { code: 2, stderr: "email-otp keys: Unknown option '--nope' (email-otp keys --help shows the usage)\n" })
  t.same(await failure(['rotate', '--file', join(dir, 'broken.json')]), { code: 2, stderr: 'email-otp keys: unknown command rotate (email-otp keys --help shows the usage)\n' })
  const broken = await failure(['list', '--file', join(dir, 'broken.json')])
  t.equal(broken.code, 1)
  t.match(broken.stderr, /^email-otp keys: .*broken\.json cannot be read as JSON: [^\n]+\n$/)
  const other = await failure(['list', '--file', join(dir, 'other.json')])
  t.match(other, { code: 1, stderr: /^email-otp keys: .*other\.json is not a tenants file \(email-otp tenants check .*other\.json lists its problems\)\n$/ })
  const unknown = await failure(['revoke', '--tenant', 'acme', '--id', 'sk_live_nothere', '--file', join(dir, 'missing.json')])
  t.match(unknown, { code: 1, stderr: /^email-otp keys: .*missing\.json does not exist \(keys create makes it; --file or TENANTS_FILE names another\)\n$/ })
  const restricted = await failure(['create', '--tenant', 'acme', '--kind', 'restricted', '--mode', 'test', '--file', join(dir, 'missing.json')])
  t.same(restricted, { code: 2, stderr: 'email-otp keys: a restricted key needs at least one --origin (email-otp keys --help shows the usage)\n' })
})

t.test('create, list and revoke on TENANTS_FILE, with the id create prints, as docs/keys.md shows', async (t) => {
  const file = join(t.testdir({}), 'tenants.json')
  const created = await npmKeys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'live'], { TENANTS_FILE: file })
  t.match(created.stdout, /^sk_live_[0-9A-Za-z]{32,}\n$/, 'stdout: the key alone')
  const id = /Created secret live key (sk_live_[0-9a-f]{8}) for tenant acme in /.exec(created.stderr)?.[1]
  t.ok(id, 'stderr names the key\'s id')

  const readme = readFileSync(join(root, 'docs', 'keys.md'), 'utf8')
  const readmeId = /npm run -s keys -- revoke --tenant acme --id (\S+)/.exec(readme)?.[1]
  t.ok(readmeId !== undefined && new RegExp(`npm run -s keys -- create [^\n]*--id ${readmeId}\\)?\n`).test(readme), 'docs/keys.md revokes the id its create names')
  t.match(readme, new RegExp(`Created secret live key ${readmeId ?? 'none'} for tenant acme`), 'and shows create printing it')

  const none = await keys(['list'], { TENANTS_FILE: join(t.testdirName, 'none.json') }).then(() => null, (error: { code: number, stderr: string }) => error)
  t.same([none?.code, none?.stderr], [1, `email-otp keys: ${join(t.testdirName, 'none.json')} does not exist (keys create makes it; --file or TENANTS_FILE names another)\n`], 'a file that does not exist is an error, not an empty list')
  t.match((await keys(['list'], { TENANTS_FILE: file })).stdout, new RegExp(`^acme\\t${id ?? 'none'}\\tsecret\\tlive\\tactive\\n$`))
  t.equal((await npmKeys(['revoke', '--tenant', 'acme', '--id', id ?? ''], { TENANTS_FILE: file })).stdout, `revoked acme/${id ?? ''}\n`)
  t.match((await keys(['list', '--file', file])).stdout, /\trevoked\n$/)
})

t.test('a tenants file whose templates are files is edited from any directory', async (t) => {
  const dir = t.testdir({
    templates: { acme: { 'en.txt': 'Your Acme code is {{ code }}.\n' } },
    elsewhere: { acme: { 'en.txt': 'Your Acme code: {{ code }}.\n' } },
    'tenants.json': JSON.stringify({
      tiers: { standard: { allowance: 10, window: '1d', sandboxAllowance: 10 } },
      tenants: [{ id: 'acme', tier: 'standard', templates: { en: { text: { file: 'en.txt' } } }, keys: [] }]
    })
  })
  const file = join(dir, 'tenants.json')
  const created = await keys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'test', '--file', file])
  t.match(created.stdout, /^sk_test_/, 'the template file is found in templates/acme/ beside the tenants file, not in the working directory')
  const fromEnv = await keys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'test', '--file', file], { TEMPLATES_DIR: join(dir, 'elsewhere') })
  t.match(fromEnv.stdout, /^sk_test_/, 'or in TEMPLATES_DIR/acme/')
  const missing = await keys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'test', '--file', file, '--templates', join(dir, 'nowhere')]).then(() => null, (error: { code: number, stderr: string }) => error)
  t.equal(missing?.code, 1, 'a file that would be refused is not written')
  t.notMatch(missing?.stderr, /\n\s+at /, 'no stack')
  t.match(missing?.stderr, /the templates folder .*nowhere \(TEMPLATES_DIR\) does not exist/)
})

t.test('a tenants.json written in the repository root is not committed by accident', async (t) => {
  const ignored = readFileSync(join(root, '.gitignore'), 'utf8').split('\n')
  t.ok(ignored.includes('/tenants.json'))
})

t.test('workloads: create bound to workloads, show, replace, refuse a bad pattern, unbind', async (t) => {
  const file = join(t.testdir({}), 'tenants.json')
  const api = 'spiffe://cluster.local/ns/payments/sa/api'
  const created = await keys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'live', '--workload', api, '--workload', 'spiffe://cluster.local/ns/jobs/sa/*', '--id', 'bound'], { TENANTS_FILE: file })
  t.match(created.stdout, /^sk_live_/)
  const stored = JSON.parse(readFileSync(file, 'utf8')) as { tenants: Array<{ keys: Array<{ workloads?: string[] }> }> }
  t.same(stored.tenants[0]?.keys[0]?.workloads, [api, 'spiffe://cluster.local/ns/jobs/sa/*'], 'written to the tenants file')
  t.match((await keys(['list'], { TENANTS_FILE: file })).stdout, /^acme\tbound\tsecret\tlive\tactive\tworkloads spiffe:\/\/cluster\.local\/ns\/payments\/sa\/api spiffe:\/\/cluster\.local\/ns\/jobs\/sa\/\*\n$/, 'list shows them')
  t.equal((await keys(['workloads', '--tenant', 'acme', '--id', 'bound'], { TENANTS_FILE: file })).stdout, `${api}\nspiffe://cluster.local/ns/jobs/sa/*\n`, 'workloads shows one a line')

  t.equal((await keys(['workloads', '--tenant', 'acme', '--id', 'bound', '--workload', 'web.default.serviceaccount.identity.linkerd.cluster.local'], { TENANTS_FILE: file })).stdout,
    'acme/bound: workloads web.default.serviceaccount.identity.linkerd.cluster.local\n', 'replaced')
  const refused = await keys(['workloads', '--tenant', 'acme', '--id', 'bound', '--workload', 'spiffe://cluster.local/ns/*/sa/api'], { TENANTS_FILE: file }).then(() => null, (error: { code: number, stderr: string }) => error)
  t.equal(refused?.code, 2, 'a wildcard anywhere but at the end is refused, as a bad argument')
  t.match(refused?.stderr, /--workload "spiffe:\/\/cluster\.local\/ns\/\*\/sa\/api" is not a workload identity/)
  t.same((JSON.parse(readFileSync(file, 'utf8')) as typeof stored).tenants[0]?.keys[0]?.workloads, ['web.default.serviceaccount.identity.linkerd.cluster.local'], 'and the file is left as it was')

  t.equal((await keys(['workloads', '--tenant', 'acme', '--id', 'bound', '--any'], { TENANTS_FILE: file })).stdout, 'acme/bound: any caller\n')
  t.equal((await keys(['workloads', '--tenant', 'acme', '--id', 'bound'], { TENANTS_FILE: file })).stdout, '(any caller)\n')
})
