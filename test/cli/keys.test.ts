/*
 * The keys CLI as a newcomer meets it: through `npm run keys`, without a build, with --help,
 * with the tenants file taken from TENANTS_FILE, and with the example ids of docs/keys.md.
 */
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'

const exec = promisify(execFile)
const root = new URL('../..', import.meta.url).pathname
const npmKeys = async (args: string[], env: Record<string, string> = {}): Promise<{ stdout: string, stderr: string }> =>
  await exec('npm', ['run', '-s', 'keys', '--', ...args], { cwd: root, env: { ...process.env, TENANTS_FILE: '', TEMPLATES_DIR: '', ...env }, timeout: 60_000 })

t.test('npm run keys does not build the project', async (t) => {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  t.notMatch(manifest.scripts.keys, /build|tsc/)
})

t.test('--help answers the usage and succeeds', async (t) => {
  const { stdout } = await npmKeys(['--help'])
  t.match(stdout, /^Usage:\n {2}npm run keys -- create/)
  t.match(stdout, /--file defaults to \$TENANTS_FILE/)
})

t.test('without --file nor TENANTS_FILE it says what is missing', async (t) => {
  const failed = await npmKeys(['list']).then(() => null, (error: { code: number, stderr: string }) => error)
  t.equal(failed?.code, 1)
  t.match(failed?.stderr, /keys: --file is required \(or set TENANTS_FILE\)/)
})

t.test('create, list and revoke on TENANTS_FILE, with the id create prints, as docs/keys.md shows', async (t) => {
  const file = join(t.testdir({}), 'tenants.json')
  const created = await npmKeys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'live'], { TENANTS_FILE: file })
  t.match(created.stdout, /^sk_live_[0-9A-Za-z]{32,}\n$/, 'stdout: the key alone')
  const id = /Created secret live key (sk_live_[0-9a-f]{8}) for tenant acme in /.exec(created.stderr)?.[1]
  t.ok(id, 'stderr names the key\'s id')

  const readme = readFileSync(join(root, 'docs', 'keys.md'), 'utf8')
  const readmeId = /npm run keys -- revoke --tenant acme --id (\S+)/.exec(readme)?.[1]
  t.match(readmeId, /^sk_live_[0-9a-f]{8}$/, 'docs/keys.md revokes an id of the form create prints')
  t.match(readme, new RegExp(`Created secret live key ${readmeId ?? 'none'} for tenant acme`), 'and shows create printing it')

  t.match((await npmKeys(['list'], { TENANTS_FILE: file })).stdout, new RegExp(`^acme\\t${id ?? 'none'}\\tsecret\\tlive\\tactive\\n$`))
  t.equal((await npmKeys(['revoke', '--tenant', 'acme', '--id', id ?? ''], { TENANTS_FILE: file })).stdout, `revoked acme/${id ?? ''}\n`)
  t.match((await npmKeys(['list', '--file', file])).stdout, /\trevoked\n$/)
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
  const created = await npmKeys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'test', '--file', file])
  t.match(created.stdout, /^sk_test_/, 'the template file is found in templates/acme/ beside the tenants file, not in the working directory')
  const fromEnv = await npmKeys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'test', '--file', file], { TEMPLATES_DIR: join(dir, 'elsewhere') })
  t.match(fromEnv.stdout, /^sk_test_/, 'or in TEMPLATES_DIR/acme/')
  const missing = await npmKeys(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'test', '--file', file, '--templates', join(dir, 'nowhere')]).then(() => null, (error: { code: number, stderr: string }) => error)
  t.equal(missing?.code, 1, 'a file that would be refused is not written')
  t.match(missing?.stderr, /the templates folder .*nowhere \(TEMPLATES_DIR\) does not exist/)
})

t.test('a tenants.json written in the repository root is not committed by accident', async (t) => {
  const ignored = readFileSync(join(root, '.gitignore'), 'utf8').split('\n')
  t.ok(ignored.includes('/tenants.json'))
})
