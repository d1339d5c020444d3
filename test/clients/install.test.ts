/*
 * The client library's install as docs/api.md prints it: build, pack, install the tarball in
 * an application of its own (offline: the package has no dependency), then import it by its
 * name and call the service started as `npm start` starts it.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { startServer } from '../support/service-process.js'
import { execForTest as run } from '../support/processes.js'

const root = fileURLToPath(new URL('../../', import.meta.url))
const page = readFileSync(join(root, 'docs', 'api.md'), 'utf8')
const section = page.slice(page.indexOf('## Client library'))
const commands = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].flatMap((match) => (match[1] ?? '').split('\n'))
  .map((line) => line.replace(/\s+#.*$/, '').trim()).filter((line) => line !== '')

t.test('the documented install works: build, pack, install the tarball, import it by name', async (t) => {
  t.same(commands, ['npm run client:build', 'npm pack ./clients/typescript', 'npm install /path/to/email-otp-client-0.1.0.tgz'], 'the three commands the page shows')
  const manifest = JSON.parse(readFileSync(join(root, 'clients', 'typescript', 'package.json'), 'utf8')) as { name: string, version: string }
  t.equal(`${manifest.name.replace('@', '').replace('/', '-')}-${manifest.version}.tgz`, 'email-otp-client-0.1.0.tgz', 'the tarball the page names is the one npm pack writes')

  const dir = t.testdir({ app: { 'package.json': JSON.stringify({ name: 'app', private: true, type: 'module' }) } })
  const npm = async (args: string[], cwd: string): Promise<string> => (await run('npm', args, { cwd, timeout: 120_000 })).stdout
  await npm(['run', '-s', 'client:build'], root)
  await npm(['pack', './clients/typescript', '--pack-destination', dir], root)
  await npm(['install', '--offline', '--no-audit', '--no-fund', join(dir, 'email-otp-client-0.1.0.tgz')], join(dir, 'app'))

  const server = await startServer(t, { LOG_LEVEL: 'warn' })
  const script = join(dir, 'app', 'try.js')
  writeFileSync(script, `import { createClient, EmailOtpError } from '@email-otp/client'
const otp = createClient({ baseUrl: ${JSON.stringify(server.base)}, apiKey: 'sk_test_DemoSandboxKeyForLocalUseOnly000000000' })
const { requestId } = await otp.dispatch('install.${process.pid}@example.com')
const failure = await otp.verify(requestId, '000000').then(() => null, (error) => error)
console.log(JSON.stringify({ requestId, code: failure instanceof EmailOtpError ? failure.code : String(failure) }))
`)
  const { stdout } = await run(process.execPath, [script], { cwd: join(dir, 'app'), timeout: 30_000 })
  const answer = JSON.parse(stdout) as { requestId: string, code: string }
  t.match(answer.requestId, /^otp_/, 'a dispatch through the installed package')
  t.equal(answer.code, 'CODE_MISMATCH', 'a wrong guess is an EmailOtpError with its code')
})
