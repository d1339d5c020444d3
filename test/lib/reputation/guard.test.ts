import t, { type Test } from 'tap'
import { ReputationGuard, type ReputationSettings } from '../../../lib/reputation/guard.js'
import { MemoryReputation } from '../../../lib/state/memory/reputation.js'
import { REPUTATION_PAUSED_KEY } from '../../../lib/state/redis/keys.js'
import { RedisReputation } from '../../../lib/state/redis/reputation.js'
import type { ReputationStore } from '../../../lib/state/reputation.js'
import type { Tenant } from '../../../lib/tenants/tenant.js'
import { redisTestOptions, redisWithClients } from '../../support/redis.js'

const HOUR = 3_600_000
const SETTINGS: ReputationSettings = { bounceRate: 0.1, complaintRate: 0.01, minSends: 20, windowMs: 24 * HOUR, windowSpec: '24h' }
const quiet = { info () {}, warn () {}, error () {} }

interface Harness {
  guard: ReputationGuard
  clock: { ms: number }
  webhooks: Array<{ tenant: string, type: string, data: unknown }>
  changes: Array<[string, boolean]>
  warnings: string[]
  errors: object[]
}

/** A guard over `store` with a clock the test moves, its webhooks and gauge changes recorded. */
function harness (store: ReputationStore, settings = SETTINGS, start = Date.UTC(2026, 10, 28, 12, 30)): Harness {
  const clock = { ms: start }
  const webhooks: Harness['webhooks'] = []
  const changes: Harness['changes'] = []
  const warnings: string[] = []
  const errors: object[] = []
  const guard = new ReputationGuard({
    store,
    settings,
    countPartnerReports: true,
    tenant: (id) => ({ id }) as unknown as Tenant,
    webhooks: { emit: (tenant, _mode, type, data) => { webhooks.push({ tenant: tenant.id, type, data }) } },
    log: { ...quiet, warn: (_fields, message) => { warnings.push(message) }, error: (fields) => { errors.push(fields) } },
    changed: (tenant, paused) => { changes.push([tenant, paused]) },
    now: () => clock.ms
  })
  return { guard, clock, webhooks, changes, warnings, errors }
}

function sends (guard: ReputationGuard, tenant: string, count: number): void {
  for (let index = 0; index < count; index++) guard.sent(tenant)
}

/** What the guard does alike on every store; `twin` is a second instance's store on the same state (Redis), or null. */
function guardSuite (t: Test, makeStore: () => ReputationStore, twin: (() => ReputationStore) | null): void {
  t.test('past the bounce rate with the minimum volume: paused once, announced once', async (t) => {
    const store = makeStore()
    const { guard, webhooks, changes, warnings } = harness(store)
    sends(guard, 'acme', 20)
    await guard.feedback('acme', 'bounced')
    t.notOk(guard.isPaused('acme'), '1 of 20 (5%) is below 10%')
    await guard.feedback('acme', 'bounced')
    t.ok(guard.isPaused('acme'), '2 of 20 (10%) reaches it')
    await guard.feedback('acme', 'bounced')
    t.equal(webhooks.length, 1, 'one webhook per pause')
    t.match(webhooks[0], { tenant: 'acme', type: 'tenant.sending_paused', data: { sent: 20, bounced: 2, complained: 0, bounceRate: 0.1, window: '24h', thresholds: { bounceRate: 0.1, complaintRate: 0.01, minSends: 20 } } })
    t.same(changes, [['acme', true]], 'the gauge goes to 1')
    t.equal(warnings.length, 1, 'one warning')
    t.notOk(guard.isPaused('globex'), 'another tenant is not paused')
    t.strictSame(await store.window('globex', Date.UTC(2026, 10, 28, 12, 30)), { sent: 0, bounced: 0, complained: 0 })
  })

  t.test('below the minimum volume, any rate pauses no one', async (t) => {
    const { guard, webhooks } = harness(makeStore())
    sends(guard, 'acme', 19)
    for (let index = 0; index < 19; index++) await guard.feedback('acme', 'complained')
    t.notOk(guard.isPaused('acme'))
    t.equal(webhooks.length, 0)
  })

  t.test('a complaint rate pauses by itself; partner reports count as bounces', async (t) => {
    const { guard } = harness(makeStore())
    sends(guard, 'acme', 100)
    await guard.feedback('acme', 'complained')
    t.ok(guard.isPaused('acme'), '1 complaint of 100 reaches 1%')
    const other = harness(makeStore())
    sends(other.guard, 'globex', 20)
    await other.guard.reported('globex')
    await other.guard.reported('globex')
    t.ok(other.guard.isPaused('globex'), 'two reports of 20 sends reach 10%')
  })

  t.test('the window clearing lifts the pause; counts older than the window do not count', async (t) => {
    const { guard, clock, changes } = harness(makeStore())
    sends(guard, 'acme', 20)
    clock.ms += 23 * HOUR
    await guard.feedback('acme', 'bounced')
    await guard.feedback('acme', 'bounced')
    t.ok(guard.isPaused('acme'), 'sends of 23 hours ago are in the window')
    await guard.refresh()
    t.ok(guard.isPaused('acme'), 'still past the thresholds: the pause stands')
    clock.ms += 2 * HOUR
    await guard.refresh()
    t.notOk(guard.isPaused('acme'), 'the sends left the window: 2 bounces of 0 sends is below the volume')
    t.same(changes, [['acme', true], ['acme', false]], 'the gauge goes back to 0')
  })

  t.test('resume lifts the pause and starts the window afresh', async (t) => {
    const store = makeStore()
    const { guard, webhooks, clock } = harness(store)
    sends(guard, 'acme', 20)
    await guard.feedback('acme', 'bounced')
    await guard.feedback('acme', 'bounced')
    t.ok(guard.isPaused('acme'))
    const lifted = await store.resume('acme', { forget: true, nowMs: clock.ms })
    t.match(lifted, { sent: 20, bounced: 2 }, 'the pause it lifted')
    t.notOk((await store.paused()).has('acme'), 'no instance reads it any more')
    await guard.refresh()
    t.notOk(guard.isPaused('acme'))
    t.strictSame(await store.window('acme', clock.ms), { sent: 0, bounced: 0, complained: 0 }, 'the counts are forgotten')
    await guard.feedback('acme', 'bounced')
    t.notOk(guard.isPaused('acme'), 'one more bounce does not pause it again at once')
    t.equal(await store.resume('acme', { forget: true, nowMs: clock.ms }), null, 'nothing to lift')
    t.equal(webhooks.length, 1)
  })

  t.test('the guard off counts nothing and pauses no one', async (t) => {
    const store = makeStore()
    const off = harness(store, SETTINGS)
    const guard = new ReputationGuard({ store, settings: null, countPartnerReports: true, tenant: () => undefined, webhooks: { emit () {} }, log: quiet })
    sends(guard, 'acme', 50)
    for (let index = 0; index < 50; index++) await guard.feedback('acme', 'bounced')
    await store.flush()
    t.notOk(guard.isPaused('acme'))
    t.strictSame(await store.window('acme', off.clock.ms), { sent: 0, bounced: 0, complained: 0 })
  })

  if (twin !== null) {
    t.test('a pause is shared: another instance reads it on its next refresh, and announces nothing', async (t) => {
      const here = harness(makeStore())
      const there = harness(twin())
      await there.guard.refresh()
      sends(here.guard, 'acme', 10)
      sends(there.guard, 'acme', 10)
      await there.guard.feedback('acme', 'bounced')
      await here.guard.feedback('acme', 'bounced')
      t.ok(here.guard.isPaused('acme'), 'the sends of both instances count together')
      t.notOk(there.guard.isPaused('acme'), 'the other instance has not read it yet')
      await there.guard.refresh()
      t.ok(there.guard.isPaused('acme'))
      await there.guard.feedback('acme', 'bounced')
      t.equal(here.webhooks.length + there.webhooks.length, 1, 'one webhook across instances')
    })
  }
}

t.test('memory', async (t) => {
  guardSuite(t, () => new MemoryReputation({ windowMs: SETTINGS.windowMs }), null)
})

t.test('redis', redisTestOptions(), async (t) => {
  const { client, other } = await redisWithClients(t)
  t.beforeEach(async () => { await client.flushall() })
  guardSuite(t, () => new RedisReputation(client, { windowMs: SETTINGS.windowMs }), () => new RedisReputation(other, { windowMs: SETTINGS.windowMs }))

  t.test('a stored pause that cannot be read pauses its tenant alone, is logged once, and hides no other pause', async (t) => {
    const here = harness(new RedisReputation(client, { windowMs: SETTINGS.windowMs }))
    const there = harness(new RedisReputation(other, { windowMs: SETTINGS.windowMs }), SETTINGS, here.clock.ms)
    for (const tenant of ['acme', 'globex']) {
      sends(here.guard, tenant, 20)
      await here.guard.feedback(tenant, 'bounced')
      await here.guard.feedback(tenant, 'bounced')
    }
    await client.hset(REPUTATION_PAUSED_KEY, 'globex', 'not json', 'initech', '{"sent":"many"}')
    await there.guard.refresh()
    t.ok(there.guard.isPaused('acme'), 'the readable pause is read')
    t.ok(there.guard.isPaused('globex'), 'an unreadable pause of a tenant past the thresholds still pauses it')
    t.notOk(there.guard.isPaused('initech'), 'an unreadable pause whose window is clear is lifted like any other')
    t.equal(await client.hexists(REPUTATION_PAUSED_KEY, 'initech'), 0)
    await there.guard.refresh()
    t.ok(there.guard.isPaused('globex'))
    t.match(there.errors, [{ tenant: 'globex', problem: /JSON/ }, { tenant: 'initech', problem: /not a pause/ }], 'each logged once, with why')
    t.equal(there.errors.length, 2)
  })
})
