import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import { writeTenants } from '../helper.js'
import { send } from '../support/http.js'
import { freePort } from '../support/redis.js'
import { post, startServer } from '../support/service-process.js'

const version = (text: string): string => createHash('sha256').update(text).digest('hex').slice(0, 16)

/** What the kubelet does to a mounted ConfigMap or Secret: a new timestamped folder, then `..data` swapped by a rename. */
function kubeletUpdate (mount: string, revision: string, text: string, previous: string): void {
  mkdirSync(join(mount, revision))
  writeFileSync(join(mount, revision, 'tenants.json'), text)
  symlinkSync(revision, join(mount, '..data_tmp'))
  renameSync(join(mount, '..data_tmp'), join(mount, '..data'))
  rmSync(join(mount, previous), { recursive: true })
}

t.test('a mounted tenants file updated as Kubernetes does is reloaded without a signal; a bad one keeps the previous tenants', async (t) => {
  const { path, keys, file } = writeTenants(t)
  const first = readFileSync(path, 'utf8')
  const mount = join(t.testdirName, 'mount')
  mkdirSync(join(mount, '..2026_11_24_1'), { recursive: true })
  writeFileSync(join(mount, '..2026_11_24_1', 'tenants.json'), first)
  symlinkSync('..2026_11_24_1', join(mount, '..data'))
  symlinkSync(join('..data', 'tenants.json'), join(mount, 'tenants.json'))

  const metricsPort = await freePort()
  const server = await startServer(t, { TENANTS_FILE: join(mount, 'tenants.json'), METRICS_PORT: String(metricsPort) })
  const metrics = async (): Promise<string> => (await send({ port: metricsPort, method: 'GET', path: '/metrics' })).body as string
  t.match(server.output(), new RegExp(`"version":"${version(first)}","msg":"tenants file loaded"`), 'the log names the version loaded')
  t.match(await metrics(), `email_otp_tenants_file_info{version="${version(first)}"} 1`)
  t.match(await metrics(), 'email_otp_tenants_file_last_reload_success 1', 'the load at start succeeded')

  const added = generateKey('secret', 'live')
  file.tenants[0]!.keys.push({ id: 'added', kind: 'secret', mode: 'live', sha256: hashKey(added) })
  const second = JSON.stringify(file, null, 2)
  let mark = server.output().length
  kubeletUpdate(mount, '..2026_11_24_2', second, '..2026_11_24_1')
  await server.waitFor(/"trigger":"watch","msg":"tenants file reloaded"/, mark)
  t.match(server.output().slice(mark), new RegExp(`"version":"${version(second)}"`), 'the log names the new version')
  t.equal((await post(server.base, '/otp/request', added, { email: 'jo@example.com' })).status, 200, 'the key added to the ConfigMap works')
  const afterGood = await metrics()
  t.match(afterGood, `email_otp_tenants_file_info{version="${version(second)}"} 1`)
  t.notMatch(afterGood, version(first), 'only the version in force')
  t.match(afterGood, 'email_otp_tenants_file_last_reload_success 1')
  t.match(afterGood, /email_otp_tenants_file_reloads_total\{result="ok"\} [1-9]/)

  // A problem of the file, not of one tenant (a tier all tenants share).
  const broken = second.replace('"window": "1d"', '"window": "often"')
  mark = server.output().length
  kubeletUpdate(mount, '..2026_11_24_3', broken, '..2026_11_24_2')
  await server.waitFor(/"trigger":"watch","msg":"tenants file reload failed; keeping the previous tenants"/, mark)
  t.match(server.output().slice(mark), /\/tiers\/standard\/window Expected string to match/, 'the log says why')
  t.equal((await post(server.base, '/otp/request', added, { email: 'jo@example.com' })).status, 200, 'the previous tenants stay in force')
  t.equal((await post(server.base, '/otp/request', keys.acmeLive, { email: 'jo@example.com' })).status, 200)
  const afterBad = await metrics()
  t.match(afterBad, `email_otp_tenants_file_info{version="${version(second)}"} 1`, 'the version in force is still the last good one')
  t.match(afterBad, 'email_otp_tenants_file_last_reload_success 0')
  const failures = (text: string): number => Number(/email_otp_tenants_file_reloads_total\{result="failed"\} (\d+)/.exec(text)?.[1])
  t.ok(failures(afterBad) >= 1, 'counted')

  const before = failures(await metrics())
  mark = server.output().length
  server.child.kill('SIGHUP')
  await server.waitFor(/"trigger":"signal","msg":"tenants file reload failed/, mark)
  t.equal(failures(await metrics()), before + 1, 'SIGHUP goes through the same validation')
})
