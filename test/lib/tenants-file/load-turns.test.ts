/*
 * A load of the tenants file never holds the event loop for long, whatever one tenant's entry
 * holds: a tenant with 100,000 blocked networks and 10,000 denied domains is checked and built
 * over turns of at most LOAD_TURN_UNITS, and a reload for another tenant's change takes that
 * tenant's lists from the load before instead of checking and building them again. The schema
 * walk that makes this possible words and orders every problem as Value.Errors does.
 */
import { writeFileSync } from 'node:fs'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { Value } from '@sinclair/typebox/value'
import t from 'tap'
import { BuiltLists } from '../../../lib/tenants-file/lists.js'
import { registryFromFile } from '../../../lib/tenants-file/load.js'
import { schemaErrors, type SchemaProblem } from '../../../lib/tenants-file/schema-walk.js'
import { LOAD_TURN_UNITS, LoadTurns } from '../../../lib/tenants-file/turns.js'
import type { TenantRegistry } from '../../../lib/tenants/registry.js'
import { TenantSchema } from '../../../schemas/tenants.js'
import { threadCpuMs } from '../../../lib/mail/templating/liquid.js'
import { writeTenants } from '../../helper.js'

/** Far above the few milliseconds a turn takes, far below the 300 ms one tenant's networks took in one turn. */
const TURN_CPU_BOUND_MS = 100

const networks = (salt: number): string[] => Array.from({ length: 100_000 }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${(i + salt) & 255}/32`)
const domains = (salt: number): string[] => Array.from({ length: 10_000 }, (_, i) => `d${salt}x${i}.${'a'.repeat(41)}.${'b'.repeat(51)}.example`)

/** The CPU time of the longest stretch between two turns of the event loop while `work` runs, measured from outside it. */
async function longestTurnCpuMs<T> (work: () => Promise<T>): Promise<{ result: T, longestMs: number }> {
  let longest = 0
  const watching = { on: true }
  const watch = (async () => {
    let last = threadCpuMs()
    while (watching.on) {
      await nextTurn()
      const now = threadCpuMs()
      longest = Math.max(longest, now - last)
      last = threadCpuMs()
    }
  })()
  try {
    return { result: await work(), longestMs: longest }
  } finally {
    watching.on = false
    await watch
  }
}

t.test('one tenant with 100,000 networks and 10,000 domains loads in turns of at most LOAD_TURN_UNITS; a reload for another tenant builds none of its lists again', async (t) => {
  const { path, file } = writeTenants(t, (file) => {
    file.tenants[1]!.blockedNetworks = networks(0)
    file.tenants[1]!.recipients = { denyDomains: domains(0) }
  })
  let lists = new BuiltLists()
  let registry: TenantRegistry | null = null
  const load = async (): Promise<{ turns: LoadTurns, lists: BuiltLists, longestMs: number }> => {
    const turns = new LoadTurns()
    const next = new BuiltLists(lists)
    const { result, longestMs } = await longestTurnCpuMs(async () => await registryFromFile(path, { builtLists: next, turns }, registry))
    registry = result
    lists = next
    return { turns, lists: next, longestMs }
  }

  const first = await load()
  t.ok(first.turns.count > 300_000 / LOAD_TURN_UNITS, `the lists took ${first.turns.count} turns`)
  t.ok(first.turns.longestUnits <= LOAD_TURN_UNITS, `no turn counted more than ${LOAD_TURN_UNITS} units (${first.turns.longestUnits})`)
  t.ok(first.turns.longestCpuMs < TURN_CPU_BOUND_MS, `the loader's longest turn took ${first.turns.longestCpuMs.toFixed(1)} ms of CPU`)
  t.ok(first.longestMs < TURN_CPU_BOUND_MS, `the event loop turned within ${first.longestMs.toFixed(1)} ms of CPU throughout`)
  const globex = registry!.tenants.get('globex')!
  t.ok(globex.blockedNetworks?.has('10.1.134.159'), 'the networks are blocked')
  t.equal(globex.recipientPolicy.check(`d0x9999.${'a'.repeat(41)}.${'b'.repeat(51)}.example`), 'denied', 'the domains are denied')

  const added = structuredClone(file)
  added.tenants[0]!.keys.push({ id: 'added', kind: 'secret', mode: 'live', sha256: 'f'.repeat(64) })
  writeFileSync(path, JSON.stringify(added))
  const other = await load()
  t.equal(other.lists.built, 0, 'no list checked or built again')
  t.ok(other.lists.reused >= 5, `globex's lists taken from the load before (${other.lists.reused})`)
  t.equal(registry!.tenants.get('globex')!.blockedNetworks, globex.blockedNetworks, 'the same network set serves')
  t.ok(other.turns.longestUnits <= LOAD_TURN_UNITS)

  // One domain of globex's changes: its domains are checked and built again, its networks are not.
  const changed = structuredClone(added)
  changed.tenants[1]!.recipients!.denyDomains![0] = 'changed.example'
  writeFileSync(path, JSON.stringify(changed))
  const own = await load()
  t.equal(own.lists.built, 2, 'the domains: their schema check and their set')
  t.equal(registry!.tenants.get('globex')!.blockedNetworks, globex.blockedNetworks, 'the network set is the one built first')
  t.equal(registry!.tenants.get('globex')!.recipientPolicy.check('changed.example'), 'denied')
})

t.test('100,000 IPv6 networks are sorted and merged in turns as well', async (t) => {
  const { path } = writeTenants(t, (file) => {
    file.tenants[1]!.blockedNetworks = Array.from({ length: 100_000 }, (_, i) => `2001:db8:${((i * 7919) % 65536).toString(16)}:${(i >> 3).toString(16)}::/64`)
  })
  const turns = new LoadTurns()
  const { result, longestMs } = await longestTurnCpuMs(async () => await registryFromFile(path, { turns }))
  t.ok(turns.longestUnits <= LOAD_TURN_UNITS, `no turn counted more than ${LOAD_TURN_UNITS} units (${turns.longestUnits})`)
  t.ok(turns.longestCpuMs < TURN_CPU_BOUND_MS, `the loader's longest turn took ${turns.longestCpuMs.toFixed(1)} ms of CPU`)
  t.ok(longestMs < TURN_CPU_BOUND_MS, `the event loop turned within ${longestMs.toFixed(1)} ms of CPU throughout`)
  t.ok(result.tenants.get('globex')!.blockedNetworks?.has('2001:db8:1eef::1'), 'the networks are blocked')
})

t.test('a tenant\'s problems, its lists\' among them, are the same and in the same order whether its lists are checked or taken from the load before', async (t) => {
  const { path, file } = writeTenants(t, (file) => {
    const globex = file.tenants[1]!
    globex.tier = 'gold'
    globex.brand = { name: 'Globex', from: 'no address' }
    globex.blockedNetworks = ['192.0.2.0/24', 'not a network']
    globex.webhooks = [{ url: 'ftp://hooks.example', secret: `whsec_${Buffer.alloc(32).toString('base64')}`, events: ['verification.succeeded'] }]
  })
  // In the order the loader has always listed them.
  const expected = [
    "/tenants/1/webhooks/0/url Expected string to match '^https?://'",
    '/tenants/1/tier names no tier of /tiers',
    '/tenants/1/brand/from: email must not contain comments or whitespace',
    '/tenants/1/blockedNetworks: 1 entries are not addresses or CIDRs'
  ]
  let lists = new BuiltLists()
  let registry = await registryFromFile(path, { builtLists: lists })
  t.strictSame(registry.refused.get('globex')?.problems, expected)
  file.tenants[0]!.brand = { name: 'Acme Corp' }
  writeFileSync(path, JSON.stringify(file))
  lists = new BuiltLists(lists)
  registry = await registryFromFile(path, { builtLists: lists }, registry)
  t.equal(lists.built, 0)
  t.strictSame(registry.refused.get('globex')?.problems, expected, 'the same problems, from the lists reused')
})

t.test('the schema walk finds what Value.Errors finds, in the same words and order', async (t) => {
  const key = { id: 'k', kind: 'restricted', mode: 'live', sha256: 'a'.repeat(64), origins: ['app.example.com'] }
  const entries: unknown[] = [
    null,
    [],
    'acme',
    {},
    { id: 'Bad Id', tier: '', keys: 'none', surplus: 1, 'a/b~c': 2 },
    { id: 'acme', tier: 't', keys: [key, { ...key, id: '', origins: ['UPPER', 7], extra: true }, null], blockedNetworks: ['10.0.0.0/8', 5, 'x'.repeat(65)] },
    { id: 'acme', tier: 't', keys: [], recipients: { denyDomains: ['ok.example', 'NOT OK', ''], allowDomains: 'x', other: [] } },
    { id: 'acme', tier: 't', keys: [], blockedNetworks: Array.from({ length: 100_001 }, () => '10.0.0.1') },
    { id: 'acme', tier: 't', keys: [{ ...key, workloads: [] }], webhooks: [{ url: 'ftp://x', secret: 'no', events: ['a', 'a'] }], quota: { window: 7 }, brand: { name: '' }, templates: { english: {} } },
    { id: 'acme', tier: 't', keys: [], captcha: { provider: 'nobody', secret: '' }, reviewAddresses: [{}], ttlSeconds: 0.5, limits: { source: '1' } }
  ]
  for (const entry of entries) {
    const walked: SchemaProblem[] = []
    const steps = schemaErrors(TenantSchema, entry, '/tenants/0', { turns: new LoadTurns(), lists: new BuiltLists() }, (problem) => walked.push(problem) > 0)
    new LoadTurns().atOnce(steps)
    const expected = [...Value.Errors(TenantSchema, entry)].map((error) => ({ path: `/tenants/0${error.path}`, message: error.message }))
    t.strictSame(walked, expected, JSON.stringify(entry).slice(0, 80))
  }
})
