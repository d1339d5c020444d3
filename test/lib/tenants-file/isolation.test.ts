/*
 * One tenant's entry in the tenants file never takes the others down: a tenant whose entry
 * breaks a rule is refused alone (its keys known, answering 503), the others are served; a
 * reload that breaks a serving tenant keeps its last good configuration, with the new file's
 * revocations; problems that are not one tenant's still refuse the file, every problem listed.
 */
import { writeFileSync } from 'node:fs'
import t from 'tap'
import { registryFromFile, TenantsFileError } from '../../../lib/tenants-file/load.js'
import type { TenantsFile } from '../../../schemas/tenants.js'
import { writeTenants } from '../../helper.js'

const now = Date.now()

/** The problems of a load that must refuse the whole file. */
async function fileRefusal (path: string): Promise<readonly string[]> {
  try {
    await registryFromFile(path)
  } catch (error) {
    if (error instanceof TenantsFileError) return error.problems
    throw error
  }
  return []
}

t.test('a tenant whose entry breaks rules is refused alone, with every problem of its entry', async (t) => {
  const { path, keys } = writeTenants(t, (file) => {
    const acme = file.tenants[0]!
    acme.tier = 'gold'
    acme.webhooks = [{ url: 'http://hooks.acme.test/otp', secret: `whsec_${Buffer.alloc(32).toString('base64')}`, events: ['verification.succeeded'] }]
    acme.templates = { en: { subject: 'Your code {{ code }}' } }
    // A schema problem does not hide the rule problems of the rest of the entry.
    acme.ttlSeconds = 0
  })
  const registry = await registryFromFile(path)
  t.same([...registry.tenants.keys()], ['globex'], 'the other tenant is served')
  t.same([...registry.refused.keys()], ['acme'])
  t.same(registry.refused.get('acme')?.problems, [
    '/tenants/0/ttlSeconds Expected integer to be greater or equal to 1',
    '/tenants/0/tier names no tier of /tiers',
    '/tenants/0/webhooks/0/url must be https:// (http:// only on a loopback host, for development)',
    '/tenants/0/templates/en/subject (tenant acme, locale en, subject): the subject must not contain the code: subjects show in notifications and mailbox lists'
  ], 'its schema and rule problems, its templates\' too: nothing waits for the next run')
  t.equal(registry.refused.get('acme')?.serving, 'none')
  t.same(registry.identify(keys.acmeLive, now), { refused: 'acme' }, 'its keys are recognised as refused')
  t.equal(registry.authenticate(keys.acmeLive, now), null)
  t.equal(registry.identify(keys.acmeRevoked, now), null, 'a revoked key of a refused tenant is still a 401')
  t.equal(registry.identify(keys.acmeExpired, now), null, 'an expired one too')
  t.equal(registry.authenticate(keys.globexTest, now)?.tenant.id, 'globex')
})

t.test('every per-tenant part: webhooks, CAPTCHA, review addresses, limits, keys, templates', async (t) => {
  const parts: Array<[string, (file: TenantsFile) => void, RegExp]> = [
    ['webhooks', (file) => { file.tenants[0]!.webhooks = [{ url: 'https://hooks.acme.test/otp', secret: 'whsec_AAAA', events: ['verification.succeeded'] }] }, /^\/tenants\/0\/webhooks\/0\/secret/],
    ['CAPTCHA', (file) => { file.tenants[0]!.captcha = { provider: 'turnstile', secret: 's', minScore: 0.5 } }, /^\/tenants\/0\/captcha\/minScore/],
    ['review addresses', (file) => { file.tenants[0]!.reviewAddresses = [{ address: 'review@acme.test', codeSha256: '0'.repeat(64), expiresAt: '2999-01-01T00:00:00Z' }] }, /^\/tenants\/0\/reviewAddresses\/0\/expiresAt is more than 90 days ahead/],
    ['limits', (file) => { file.tenants[0]!.limits = { source: 'often' } }, /^\/tenants\/0\/limits\/source /],
    ['keys', (file) => { file.tenants[0]!.keys[2]!.origins = [] }, /^\/tenants\/0\/keys\/2\/origins: a restricted key needs at least one origin/],
    ['templates', (file) => { file.tenants[0]!.templates = { en: { text: '{{ code }}{% for i in (1..700) %}{% for j in (1..700) %}x{% endfor %}{% endfor %}' } } }, /^\/tenants\/0\/templates\/en\/text \(tenant acme, locale en, text\): .*units of work/]
  ]
  for (const [what, mutate, problem] of parts) {
    const { path, keys } = writeTenants(t, mutate)
    const registry = await registryFromFile(path)
    t.match(registry.refused.get('acme')?.problems, [problem], `${what}: acme refused with its problem`)
    t.equal(registry.authenticate(keys.globexTest, now)?.tenant.id, 'globex', `${what}: globex served`)
  }
})

t.test('what is not one tenant\'s refuses the file, listing every problem of every tenant', async (t) => {
  const { path } = writeTenants(t, (file) => {
    file.tiers.broken = { allowance: -1, window: '1d', sandboxAllowance: 0 }
    file.tenants[1]!.keys.push({ ...file.tenants[0]!.keys[0]! })
    file.tenants.push({ ...file.tenants[1]!, keys: [] })
    file.tenants[0]!.tier = 'gold'
  })
  t.same(await fileRefusal(path), [
    '/tiers/broken/allowance Expected integer to be greater or equal to 0',
    '/tenants/1/keys/1/sha256 is already used by a key of another tenant (/tenants/0/keys/0/sha256)',
    '/tenants/2/id appears twice (first at /tenants/1/id)',
    '/tenants/0/tier names no tier of /tiers'
  ])
})

t.test('a reload that breaks a serving tenant keeps its last good configuration, with the new file\'s revocations', async (t) => {
  const { path, keys, file } = writeTenants(t, (file) => { file.tenants[0]!.brand = { name: 'Acme Good' } })
  const first = await registryFromFile(path)
  const broken = structuredClone(file)
  broken.tenants[0]!.brand = { name: 'Acme New' }
  broken.tenants[0]!.webhooks = [{ url: 'ftp://hooks.acme.test', secret: `whsec_${Buffer.alloc(32).toString('base64')}`, events: ['verification.succeeded'] }]
  broken.tenants[0]!.keys[1]!.revoked = true
  broken.tenants[0]!.keys.splice(2, 1)
  broken.tenants[1]!.brand = { name: 'Globex New' }
  writeFileSync(path, JSON.stringify(broken))
  const second = await registryFromFile(path, {}, first)
  t.same(second.refused.get('acme'), { id: 'acme', problems: ['/tenants/0/webhooks/0/url Expected string to match \'^https?://\''], serving: 'previous' })
  t.equal(second.authenticate(keys.acmeLive, now)?.tenant.brandName, 'Acme Good', 'acme is served on its last good entry')
  t.equal(second.identify(keys.acmeTest, now), null, 'a key the new entry revokes is refused at once')
  t.equal(second.identify(keys.acmeBrowser, now), null, 'a key the new entry removes is refused at once')
  t.equal(second.authenticate(keys.globexTest, now)?.tenant.brandName, 'Globex New', 'the other tenants get the new file')

  // Still broken on the next reload: still the last good configuration.
  const third = await registryFromFile(path, {}, second)
  t.equal(third.authenticate(keys.acmeLive, now)?.tenant.brandName, 'Acme Good')
  // Fixed: the new entry.
  broken.tenants[0]!.webhooks = []
  writeFileSync(path, JSON.stringify(broken))
  const fixed = await registryFromFile(path, {}, third)
  t.equal(fixed.refused.size, 0)
  t.equal(fixed.authenticate(keys.acmeLive, now)?.tenant.brandName, 'Acme New')
})

t.test('a tenants file that is not JSON: the position and the JSON path, never the text', async (t) => {
  const secret = `whsec_${Buffer.alloc(32, 9).toString('base64')}`
  const { path, file } = writeTenants(t)
  const text = JSON.stringify({ ...file, tenants: [{ ...file.tenants[0], webhooks: [{ url: 'https://hooks.acme.test/otp', secret, events: ['verification.succeeded'] }] }] }, null, 2)
  // A typo: the secret's opening quote left out (JSON.parse's message then quotes its start).
  writeFileSync(path, text.replace(`"${secret}"`, `${secret}"`))
  const problems = await fileRefusal(path)
  t.equal(problems.length, 1)
  t.match(problems[0], /is not valid JSON: .* at line \d+, column \d+ \(in \/tenants\/0\/webhooks\/0\/secret\)$/)
  t.notOk(problems[0]?.includes(secret.slice(6, 10)), 'nothing of the secret')
})
