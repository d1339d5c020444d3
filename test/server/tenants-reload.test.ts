/*
 * A reload of the tenants file never holds the service for every tenant: it lets requests be
 * answered between tenants, template parts and turns of a tenant's lists, checks again only
 * the template parts and lists that changed, and refuses a file over TENANTS_FILE_MAX_BYTES
 * unread. A tenant whose templates count more than TENANT_TEMPLATE_WORK_LIMIT is refused alone.
 */
import { renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import { TENANT_TEMPLATE_WORK_LIMIT } from '../../lib/mail/templating/liquid-bounds.js'
import { LOAD_TURN_UNITS } from '../../lib/tenants-file/turns.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { writeTenants } from '../helper.js'
import { costliestAcceptedTemplates } from '../support/costly-templates.js'
import { post, refusedStart, startServer } from '../support/service-process.js'

/** What `keys create` and the kubelet do: the new file written beside, then renamed over the watched one. */
function replace (path: string, text: string): void {
  writeFileSync(`${path}.next`, text)
  renameSync(`${path}.next`, path)
}

// 111 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('a reload with the costliest accepted templates answers requests while it runs; one tenant\'s new key checks no template again', async (t) => {
  const { templates, parts } = costliestAcceptedTemplates('Globex')
  const { path, keys, file } = writeTenants(t, (file) => {
    file.tenants[1]!.brand = { name: 'Globex' }
    file.tenants[1]!.templates = templates
  })
  const server = await startServer(t, { TENANTS_FILE: path })
  t.match(server.output(), new RegExp(`"templates":\\{"checked":${parts},"reused":0\\},[^\\n]*"msg":"tenants file loaded"`), 'every part is checked at start')

  // A new brand changes what every test render reads: each part is checked again.
  const renamed = structuredClone(file)
  renamed.tenants[1]!.brand = { name: 'Globex Corp' }
  let mark = server.output().length
  replace(path, JSON.stringify(renamed))
  await server.waitFor(/"msg":"tenants file reload started/, mark)
  const health = await fetch(`${server.base}/healthz`)
  const dispatch = await post(server.base, '/otp/request', keys.acmeTest, { email: 'during@example.com' })
  t.notMatch(server.output().slice(mark), /tenants file reloaded/, 'both answers came while the reload was still checking templates')
  t.equal(health.status, 200)
  t.equal(dispatch.status, 200, 'another tenant is served during the reload')
  await server.waitFor(/"msg":"tenants file reloaded"/, mark)
  t.match(server.output().slice(mark), `"templates":{"checked":${parts},"reused":0}`, 'the reload checked the changed parts')

  // Only acme's entry changes: none of globex's templates is checked again.
  const added = generateKey('secret', 'live')
  const withKey = structuredClone(renamed)
  withKey.tenants[0]!.keys.push({ id: 'added', kind: 'secret', mode: 'live', sha256: hashKey(added) })
  mark = server.output().length
  replace(path, JSON.stringify(withKey))
  await server.waitFor(/"msg":"tenants file reloaded"/, mark)
  t.match(server.output().slice(mark), `"templates":{"checked":0,"reused":${parts}}`, 'every template part is reused')
  t.equal((await post(server.base, '/otp/request', added, { email: 'jo@example.com' })).status, 200, 'the new key works')

  // Past TENANTS_FILE_MAX_BYTES (4 MiB by default) the file is not read; the tenants in force stay.
  const oversized = JSON.stringify(withKey) + ' '.repeat(4 * 1024 * 1024)
  mark = server.output().length
  replace(path, oversized)
  await server.waitFor(/"msg":"tenants file reload failed; keeping the previous tenants"/, mark)
  t.match(server.output().slice(mark), `is ${Buffer.byteLength(oversized)} bytes; TENANTS_FILE_MAX_BYTES allows 4194304`, 'the log says why, in one line')
  t.equal((await post(server.base, '/otp/request', added, { email: 'jo@example.com' })).status, 200, 'the last good tenants serve')
})

t.test('a reload with one tenant holding 100,000 networks and 10,000 domains: turns of at most LOAD_TURN_UNITS, and another tenant\'s change builds none of its lists', async (t) => {
  const { path, keys, file } = writeTenants(t, (file) => {
    file.tenants[1]!.blockedNetworks = Array.from({ length: 100_000 }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}/32`)
    file.tenants[1]!.recipients = { denyDomains: Array.from({ length: 10_000 }, (_, i) => `d${i}.${'a'.repeat(41)}.${'b'.repeat(51)}.example`) }
  })
  const server = await startServer(t, { TENANTS_FILE: path })
  /** The figures of the last load logged from `mark` on. */
  const figures = async (message: string, mark: number): Promise<{ lists: { built: number, reused: number }, turns: { count: number, longestUnits: number } }> => {
    await server.waitFor(new RegExp(`"msg":"${message}"`), mark)
    const line = server.output().slice(mark).split('\n').find((line) => line.includes(`"msg":"${message}"`)) ?? '{}'
    return JSON.parse(line)
  }
  const loaded = await figures('tenants file loaded', 0)
  t.ok(loaded.turns.longestUnits <= LOAD_TURN_UNITS && loaded.turns.count > 100, `start-up: ${loaded.turns.count} turns, at most ${loaded.turns.longestUnits} units each`)

  const withKey = structuredClone(file)
  const added = generateKey('secret', 'live')
  withKey.tenants[0]!.keys.push({ id: 'added', kind: 'secret', mode: 'live', sha256: hashKey(added) })
  const mark = server.output().length
  replace(path, JSON.stringify(withKey))
  const reloaded = await figures('tenants file reloaded', mark)
  t.equal(reloaded.lists.built, 0, 'acme\'s change builds no list again')
  t.ok(reloaded.lists.reused >= 5, `globex's lists are reused (${reloaded.lists.reused})`)
  t.ok(reloaded.turns.longestUnits <= LOAD_TURN_UNITS)
  t.equal((await post(server.base, '/otp/request', added, { email: 'jo@example.com' })).status, 200, 'the new key works')
  t.equal((await post(server.base, '/otp/request', keys.globexTest, { email: `jo@d9999.${'a'.repeat(41)}.${'b'.repeat(51)}.example` })).body.code, 'RECIPIENT_BLOCKED', 'globex\'s domains still deny')
})

t.test('a tenant whose templates count more than the budget is refused alone; a file over the size bound stops start-up', async (t) => {
  const { templates } = costliestAcceptedTemplates('Globex', 1)
  const { path, keys } = writeTenants(t, (file: TenantsFile) => {
    file.tenants[1]!.brand = { name: 'Globex' }
    file.tenants[1]!.templates = templates
  })
  const server = await startServer(t, { TENANTS_FILE: path })
  const refused = await post(server.base, '/otp/request', keys.globexTest, { email: 'jo@example.com' })
  t.same({ status: refused.status, code: refused.body.code }, { status: 503, code: 'TENANT_MISCONFIGURED' }, 'the costly tenant answers the stable 503')
  t.equal((await post(server.base, '/otp/request', keys.acmeTest, { email: 'jo@example.com' })).status, 200, 'the other tenant is served')
  t.match(server.output(), `/tenants/1/templates (tenant globex): the templates count more than ${TENANT_TEMPLATE_WORK_LIMIT.toLocaleString('en')} units of work at load`, 'the log names the tenant and the budget')

  const small = join(t.testdirName, 'small.json')
  const padded = JSON.stringify({ tiers: {}, tenants: [] }) + ' '.repeat(70 * 1024)
  writeFileSync(small, padded)
  const { exitCode, stderr } = await refusedStart({ TENANTS_FILE: small, TENANTS_FILE_MAX_BYTES: '65536', PORT: '0' })
  t.equal(exitCode, 1)
  t.equal(stderr.trim(), `email-otp: tenants file ${small} is ${padded.length} bytes; TENANTS_FILE_MAX_BYTES allows 65536`)
})
