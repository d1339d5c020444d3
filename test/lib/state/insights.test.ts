import t, { type Test } from 'tap'
import { MemoryInsights } from '../../../lib/state/memory/insights.js'
import { MemoryVerificationLog } from '../../../lib/state/memory/verification-log.js'
import { MAX_PENDING_TALLIES, RedisInsights } from '../../../lib/state/redis/insights.js'
import { RedisVerificationLog } from '../../../lib/state/redis/verification-log.js'
import { bucketStart, DURATION_BOUNDS_SECONDS, durationField, type InsightsLimits, type InsightsStore } from '../../../lib/state/insights.js'
import type { LaterEvent, VerificationId, VerificationLog } from '../../../lib/state/verification-log.js'
import { connectFailFast, redisTestOptions, redisWithClients } from '../../support/redis.js'

const HOUR = 3_600_000
const DAY = 86_400_000
let ids = 0
let tenants = 0

/** A tenant of the test's own, so that no two tests share a bucket. */
function freshTenant (): string {
  return `t${++tenants}-${process.pid}`
}

function freshId (tenantId: string, mode: VerificationId['mode'] = 'live'): VerificationId {
  return { tenantId, mode, requestId: `req-${++ids}-${process.pid}` }
}

const iso = (ms: number): string => new Date(ms).toISOString()

/** The last second of the hour before the current one: later events land in the next hour, and the day may turn too. */
const cohortMs = (): number => bucketStart('hour', Date.now()) - 1000

interface Stores {
  log: VerificationLog
  insights: InsightsStore
}

/** Starts a story at `requestedMs` and records the events, each `at` its own time. */
function play (log: VerificationLog, id: VerificationId, requestedMs: number, events: LaterEvent[]): void {
  log.start(id, 'backend', { type: 'requested', at: iso(requestedMs), keyId: 'sk1', expiresAt: iso(requestedMs + 600_000) })
  for (const event of events) log.record(id, event)
}

async function hourAndDay (stores: Stores, tenantId: string, atMs: number, mode: VerificationId['mode'] = 'live'): Promise<[Record<string, number>, Record<string, number>]> {
  await stores.log.flush()
  await stores.insights.flush()
  const [hour] = await stores.insights.read(tenantId, mode, 'hour', [bucketStart('hour', atMs)])
  const [day] = await stores.insights.read(tenantId, mode, 'day', [bucketStart('day', atMs)])
  return [hour ?? {}, day ?? {}]
}

/** What every insights store does alike, counted by its verification log. */
function insightsSuite (t: Test, make: (limits: InsightsLimits) => Stores): void {
  t.test('a verification counts in the hour and the day it was requested in, whenever its events come', async (t) => {
    const stores = make({ retentionMs: 90 * DAY })
    const tenant = freshTenant()
    const requested = cohortMs()
    const id = freshId(tenant)
    play(stores.log, id, requested, [
      { type: 'sent', at: iso(requested + 500), provider: 'ses' },
      { type: 'delivered', at: iso(requested + 2500) },
      { type: 'verified', at: iso(requested + 40_500) }
    ])
    const [hour, day] = await hourAndDay(stores, tenant, requested)
    const expected = { requested: 1, sent: 1, delivered: 1, verified: 1, 'ttd:2': 1, 'ttv:45': 1 }
    t.strictSame(hour, expected, 'the hour of the request: 2 s to delivery, 40 s to verify')
    t.strictSame(day, expected, 'and its day')
    const [next] = await stores.insights.read(tenant, 'live', 'hour', [bucketStart('hour', requested) + HOUR])
    t.strictSame(next, {}, 'nothing in the hour the later events happened in')
  })

  t.test('once per verification, by kind; a wrong guess only as its first guess; nothing for requestIds never requested', async (t) => {
    const stores = make({ retentionMs: 90 * DAY })
    const tenant = freshTenant()
    const requested = cohortMs()
    const at = iso(requested + 1000)
    const first = freshId(tenant)
    play(stores.log, first, requested, [
      { type: 'sent', at, provider: 'ses' },
      { type: 'delivered', at }, { type: 'delivered', at },
      { type: 'bounced', at, bounceType: 'permanent' }, { type: 'bounced', at, bounceType: 'transient' },
      { type: 'complained', at }, { type: 'complained', at },
      { type: 'delayed', at },
      { type: 'wrong_guess', at, reason: 'wrong_code' }, { type: 'wrong_guess', at, reason: 'malformed_code' }, { type: 'wrong_guess', at, reason: 'wrong_code' },
      { type: 'locked', at }, { type: 'locked', at }
    ])
    const second = freshId(tenant)
    play(stores.log, second, requested, [
      { type: 'delivery_failed', at, reason: 'rejected' }, { type: 'delivery_failed', at, reason: 'timeout' }
    ])
    const third = freshId(tenant)
    play(stores.log, third, requested, [
      { type: 'sent', at, provider: 'smtp' }, { type: 'verified', at }, { type: 'verified', at }, { type: 'receipt_redeemed', at }, { type: 'receipt_redeemed', at },
      // A guess after the code was used up meets no code: anyone holding the requestId could repeat it.
      { type: 'wrong_guess', at, reason: 'wrong_code' }
    ])
    const stranger = freshId(tenant)
    stores.log.record(stranger, { type: 'wrong_guess', at, reason: 'wrong_code' })
    stores.log.record(stranger, { type: 'verified', at })
    const [hour] = await hourAndDay(stores, tenant, requested)
    t.strictSame(hour, {
      requested: 3,
      sent: 2,
      delivered: 1,
      'ttd:1': 1,
      'bounced:permanent': 1,
      complained: 1,
      wrong_guess: 1,
      locked: 1,
      'delivery_failed:rejected': 1,
      verified: 1,
      'ttv:1': 1,
      receipt_redeemed: 1
    }, 'a repeated notification or a second failure counts once; a bounce counts by its first type; delays are not counted')
  })

  t.test('a verification that was never sent is verified, not timed', async (t) => {
    const stores = make({ retentionMs: 90 * DAY })
    const tenant = freshTenant()
    const requested = cohortMs()
    play(stores.log, freshId(tenant), requested, [{ type: 'verified', at: iso(requested + 5000) }, { type: 'delivered', at: iso(requested + 5000) }])
    const [hour] = await hourAndDay(stores, tenant, requested)
    t.strictSame(hour, { requested: 1, verified: 1, delivered: 1 }, 'a review address: no send, so no duration and no conversion')
  })

  t.test('the histogram bins, at their bounds and past the last', async (t) => {
    const stores = make({ retentionMs: 90 * DAY })
    const tenant = freshTenant()
    const requested = cohortMs()
    const sentMs = requested + 100
    for (const seconds of [0, 1, 1.001, 3600, 3600.5, 86_400]) {
      play(stores.log, freshId(tenant), requested, [{ type: 'sent', at: iso(sentMs), provider: 'ses' }, { type: 'verified', at: iso(sentMs + seconds * 1000) }])
    }
    const [hour] = await hourAndDay(stores, tenant, requested)
    t.match(hour, { 'ttv:1': 2, 'ttv:2': 1, 'ttv:3600': 1, 'ttv:inf': 2 })
    t.equal(durationField('ttv', -5000), 'ttv:1', 'a clock a little behind counts as no time')
  })

  t.test('refusals count in their own hour and day, per tenant and mode', async (t) => {
    const stores = make({ retentionMs: 90 * DAY })
    const tenant = freshTenant()
    const now = Date.now()
    for (let i = 0; i < 3; i++) stores.insights.refused(tenant, 'live', 429, now)
    stores.insights.refused(tenant, 'live', 402, now)
    stores.insights.refused(tenant, 'test', 403, now)
    const [hour, day] = await hourAndDay(stores, tenant, now)
    t.strictSame(hour, { 'refused:429': 3, 'refused:402': 1 })
    t.strictSame(day, { 'refused:429': 3, 'refused:402': 1 })
    t.strictSame((await hourAndDay(stores, tenant, now, 'test'))[0], { 'refused:403': 1 }, 'the sandbox apart')
    t.strictSame((await hourAndDay(stores, freshTenant(), now))[0], {}, 'another tenant sees nothing')
  })

  t.test("a tenant's and a mode's counts are their own", async (t) => {
    const stores = make({ retentionMs: 90 * DAY })
    const tenant = freshTenant()
    const requested = cohortMs()
    const id = freshId(tenant)
    play(stores.log, id, requested, [{ type: 'sent', at: iso(requested), provider: 'ses' }])
    stores.log.record({ ...id, mode: 'test' }, { type: 'verified', at: iso(requested) })
    stores.log.record({ ...id, tenantId: freshTenant() }, { type: 'verified', at: iso(requested) })
    t.strictSame((await hourAndDay(stores, tenant, requested))[0], { requested: 1, sent: 1 }, "the others' events counted nothing here")
    t.strictSame((await hourAndDay(stores, tenant, requested, 'test'))[0], {})
  })

  t.test('reads every bucket asked for, in order, empty ones included', async (t) => {
    const stores = make({ retentionMs: 90 * DAY })
    const tenant = freshTenant()
    const requested = cohortMs()
    play(stores.log, freshId(tenant), requested, [])
    await stores.log.flush()
    const hour = bucketStart('hour', requested)
    t.strictSame(await stores.insights.read(tenant, 'live', 'hour', [hour - HOUR, hour, hour + HOUR]), [{}, { requested: 1 }, {}])
    t.strictSame(await stores.insights.read(tenant, 'live', 'hour', []), [])
  })
}

t.test('memory', async (t) => {
  insightsSuite(t, (limits) => {
    const insights = new MemoryInsights(limits)
    return { insights, log: new MemoryVerificationLog({ retentionMs: 7 * DAY, maxPerScope: 100 }, { insights }) }
  })

  t.test('a bucket is gone at the end of retention past its end, on the injected clock', async (t) => {
    let now = Date.parse('2026-03-10T12:30:00.000Z')
    const insights = new MemoryInsights({ retentionMs: DAY }, { now: () => now })
    const log = new MemoryVerificationLog({ retentionMs: 7 * DAY, maxPerScope: 100 }, { insights, now: () => now })
    const tenant = freshTenant()
    play(log, freshId(tenant), now, [])
    insights.refused(tenant, 'live', 429, now)
    const hour = bucketStart('hour', now)
    const day = bucketStart('day', now)
    now = hour + HOUR + DAY - 1
    t.strictSame(await insights.read(tenant, 'live', 'hour', [hour]), [{ requested: 1, 'refused:429': 1 }], "the hour's last millisecond of retention")
    now += 1
    t.strictSame(await insights.read(tenant, 'live', 'hour', [hour]), [{}], 'the hour is gone')
    t.strictSame(await insights.read(tenant, 'live', 'day', [day]), [{ requested: 1, 'refused:429': 1 }], 'its day stays until its own end')
    now = day + 2 * DAY
    t.strictSame(await insights.read(tenant, 'live', 'day', [day]), [{}])
    insights.refused(tenant, 'live', 402, now)
    t.strictSame(await insights.read(tenant, 'live', 'hour', [hour]), [{}], 'and stays gone once a new bucket swept it')
  })
})

t.test('redis', redisTestOptions(), async (t) => {
  const { client, server } = await redisWithClients(t)
  insightsSuite(t, (limits) => ({ insights: new RedisInsights(client, limits), log: new RedisVerificationLog(client, { retentionMs: 7 * DAY, maxPerScope: 100 }, limits) }))

  t.test('bucket keys carry the scope as their hash tag and expire INSIGHTS_DAYS after their end', async (t) => {
    const limits = { retentionMs: 5 * DAY }
    const insights = new RedisInsights(client, limits)
    const log = new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: 100 }, limits)
    const requested = cohortMs()
    play(log, freshId('tagged'), requested, [])
    const now = Date.now()
    insights.refused('tagged', 'live', 429, now)
    await log.flush()
    await insights.flush()
    const expected: Array<[string, number]> = [
      [`insights:{tagged:live}:h:${Math.floor(requested / HOUR)}`, bucketStart('hour', requested) + HOUR + 5 * DAY],
      [`insights:{tagged:live}:d:${Math.floor(requested / DAY)}`, bucketStart('day', requested) + DAY + 5 * DAY],
      [`insights:{tagged:live}:h:${Math.floor(now / HOUR)}`, bucketStart('hour', now) + HOUR + 5 * DAY]
    ]
    for (const [key, end] of expected) {
      t.equal(Number(await client.call('PEXPIRETIME', key)), end, `${key} expires at its end plus retention`)
    }
  })

  t.test('refusals are tallied, not written per request: one increment per bucket and status', async (t) => {
    const insights = new RedisInsights(client, { retentionMs: DAY })
    const calls = async (command: string): Promise<number> => Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(await client.info('commandstats'))?.[1] ?? 0)
    const before = await calls('hincrby')
    const tenant = freshTenant()
    const now = Date.now()
    for (let i = 0; i < 500; i++) insights.refused(tenant, 'live', 429, now)
    await insights.flush()
    t.equal(await calls('hincrby') - before, 2, 'the hour and the day, once each')
    t.strictSame(await insights.read(tenant, 'live', 'hour', [bucketStart('hour', now)]), [{ 'refused:429': 500 }])
  })

  t.test('the tallies waiting for a write are bounded: past them a refusal is dropped and counted', async (t) => {
    const insights = new RedisInsights(client, { retentionMs: DAY })
    const now = Date.now()
    for (let i = 0; i <= MAX_PENDING_TALLIES; i++) insights.refused(`flood-${i}`, 'live', 429, now)
    insights.refused('flood-0', 'live', 429, now)
    t.equal(insights.dropped(), 1, 'one tally past the bound; an existing one still counts')
    await insights.flush()
    t.strictSame(await insights.read('flood-0', 'live', 'hour', [bucketStart('hour', now)]), [{ 'refused:429': 2 }])
  })

  t.test('a write that fails loses its tally, counted, and is not tried again', async (t) => {
    const doomed = await connectFailFast(server.url)
    const insights = new RedisInsights(doomed, { retentionMs: DAY })
    doomed.disconnect()
    insights.refused('doomed', 'live', 429, Date.now())
    insights.refused('doomed', 'live', 403, Date.now())
    await insights.flush()
    t.equal(insights.dropped(), 2)
    await insights.flush()
    t.equal(insights.dropped(), 2, 'nothing left to write')
  })

  t.test('what a bucket costs Redis, every field counted (docs/insights.md)', async (t) => {
    const fields = [
      'requested', 'sent', 'delivered', 'complained', 'locked', 'verified', 'receipt_redeemed', 'wrong_guess',
      ...['timeout', 'connection', 'throttled', 'provider', 'rejected', 'unavailable', 'unknown', 'suppressed', 'sending_paused'].map((reason) => `delivery_failed:${reason}`),
      'bounced:permanent', 'bounced:transient', 'refused:402', 'refused:403', 'refused:429',
      ...[...DURATION_BOUNDS_SECONDS, 'inf'].flatMap((bound) => [`ttv:${bound}`, `ttd:${bound}`])
    ]
    const typical = ['requested', 'sent', 'delivered', 'verified', 'receipt_redeemed', 'wrong_guess', 'refused:429', 'ttv:10', 'ttv:30', 'ttv:60', 'ttd:1', 'ttd:2']
    const measure = async (name: string, counted: string[]): Promise<number> => {
      const key = `insights:{measured:live}:${name}`
      for (const field of counted) await client.hincrby(key, field, 123_456)
      await client.pexpire(key, DAY)
      const bytes = Number(await client.call('MEMORY', 'USAGE', key))
      t.comment(`${name}, ${counted.length} fields: ${bytes} bytes a bucket; 90 days of hours and days (2,250 buckets): ${Math.round(bytes * 2250 / 1024)} KiB`)
      return bytes
    }
    t.ok(await measure('every field', fields) <= 1536, 'a bucket with every field within 1.5 KiB')
    t.ok(await measure('typical', typical) <= 512, 'a typical bucket within 512 bytes')
  })

  t.test('a story written before it kept its request time counts nothing (a rolling upgrade)', async (t) => {
    const log = new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: 100 })
    const insights = new RedisInsights(client, { retentionMs: DAY })
    const tenant = freshTenant()
    const id = freshId(tenant)
    const requested = cohortMs()
    await client.hset(`vlog:{${tenant}:live}:${id.requestId}`, 'listed', 1, 'e1', '{}', 'n:requested', 1)
    log.record(id, { type: 'verified', at: iso(requested) })
    await log.flush()
    t.strictSame(await insights.read(tenant, 'live', 'day', [bucketStart('day', requested), bucketStart('day', Date.now())]), [{}, {}])
    t.equal(await client.hget(`vlog:{${tenant}:live}:${id.requestId}`, 'n:verified'), '1', 'the story took the event all the same')
  })
})
