import t, { type Test } from 'tap'
import { MemoryVerificationLog } from '../../../lib/state/memory/verification-log.js'
import { MAX_BUFFERED_EVENTS, RedisVerificationLog } from '../../../lib/state/redis/verification-log.js'
import { browserStories, LISTED_PER_TYPE, type LaterEvent, type RequestedEvent, type VerificationId, type VerificationLog, type VerificationLogLimits } from '../../../lib/state/verification-log.js'
import { connectFailFast, redisTestOptions, redisWithClients } from '../../support/redis.js'
import { attemptUntil } from '../../support/wait.js'

const DAY = 86_400_000
let ids = 0
function freshId (tenantId = 'acme', mode: VerificationId['mode'] = 'live'): VerificationId {
  return { tenantId, mode, requestId: `req-${++ids}-${process.pid}` }
}

const at = '2026-01-01T00:00:00.000Z'
const requested: RequestedEvent = { type: 'requested', at, keyId: 'sk1', expiresAt: '2026-01-01T00:10:00.000Z' }

/** What every verification log does alike. */
function logSuite (t: Test, makeLog: (limits: VerificationLogLimits) => VerificationLog): void {
  t.test('a story starts with requested and keeps its events in order', async (t) => {
    const log = makeLog({ retentionMs: DAY, maxPerScope: 100 })
    const id = freshId()
    log.start(id, 'backend', requested)
    log.record(id, { type: 'sent', at, provider: 'ses' })
    log.record(id, { type: 'wrong_guess', at, reason: 'wrong_code' })
    log.record(id, { type: 'bounced', at, bounceType: 'permanent' })
    log.start(id, 'backend', requested)
    log.start(id, 'browser', requested)
    await log.flush()
    t.strictSame(await log.read(id), {
      events: [requested, { type: 'sent', at, provider: 'ses' }, { type: 'wrong_guess', at, reason: 'wrong_code' }, { type: 'bounced', at, bounceType: 'permanent' }],
      counts: { requested: 1, sent: 1, wrong_guess: 1, bounced: 1 }
    }, 'a second requested of one requestId changes nothing')
  })

  t.test('a story written over several writes keeps its events in order and its counts', async (t) => {
    const log = makeLog({ retentionMs: DAY, maxPerScope: 100 })
    const id = freshId()
    const sent: LaterEvent = { type: 'sent', at, provider: 'smtp' }
    const wrong: LaterEvent = { type: 'wrong_guess', at, reason: 'wrong_code' }
    log.start(id, 'backend', requested)
    log.record(id, sent)
    await log.flush()
    log.record(id, wrong)
    await log.flush()
    log.record(id, wrong)
    log.record(id, { type: 'verified', at })
    await log.flush()
    log.record(id, { type: 'receipt_redeemed', at })
    await log.flush()
    t.strictSame(await log.read(id), {
      events: [requested, sent, wrong, wrong, { type: 'verified', at }, { type: 'receipt_redeemed', at }],
      counts: { requested: 1, sent: 1, wrong_guess: 2, verified: 1, receipt_redeemed: 1 }
    })
  })

  t.test('events of a requestId never requested store nothing', async (t) => {
    const log = makeLog({ retentionMs: DAY, maxPerScope: 100 })
    const id = freshId()
    log.record(id, { type: 'wrong_guess', at, reason: 'wrong_code' })
    log.record(id, { type: 'verified', at })
    await log.flush()
    t.equal(await log.read(id), null)
  })

  t.test('a story is its tenant and mode\'s only', async (t) => {
    const log = makeLog({ retentionMs: DAY, maxPerScope: 100 })
    const id = freshId('acme', 'live')
    log.start(id, 'backend', requested)
    log.record({ ...id, mode: 'test' }, { type: 'verified', at })
    log.record({ ...id, tenantId: 'globex' }, { type: 'verified', at })
    await log.flush()
    t.equal(await log.read({ ...id, mode: 'test' }), null, 'not in the other mode')
    t.equal(await log.read({ ...id, tenantId: 'globex' }), null, 'not in another tenant')
    t.strictSame((await log.read(id))?.counts, { requested: 1 }, "the others' events did not reach it")
  })

  t.test('repeating events are listed up to their bound, and never crowd out the others', async (t) => {
    const log = makeLog({ retentionMs: DAY, maxPerScope: 100 })
    const id = freshId()
    log.start(id, 'backend', requested)
    log.record(id, { type: 'sent', at, provider: 'ses' })
    for (let i = 0; i < 50; i++) log.record(id, { type: 'delayed', at })
    for (let i = 0; i < 50; i++) log.record(id, { type: 'wrong_guess', at, reason: 'wrong_code' })
    const ends: LaterEvent[] = [
      { type: 'delivered', at },
      { type: 'bounced', at, bounceType: 'transient' },
      { type: 'complained', at },
      { type: 'locked', at },
      { type: 'verified', at },
      { type: 'receipt_redeemed', at },
      { type: 'delivery_failed', at, reason: 'timeout' }
    ]
    for (const event of ends) log.record(id, event)
    log.record(id, { type: 'complained', at })
    await log.flush()
    const story = await log.read(id)
    const listed = (type: string): number => story?.events.filter((event) => event.type === type).length ?? -1
    t.equal(listed('delayed'), LISTED_PER_TYPE.delayed)
    t.equal(listed('wrong_guess'), LISTED_PER_TYPE.wrong_guess)
    t.strictSame(story?.events.slice(-ends.length), ends, 'after 100 repeats the later events are listed, in order')
    t.equal(listed('complained'), 1, 'a repeat of a once-only event is counted, not listed')
    t.strictSame(story?.counts, {
      requested: 1, sent: 1, delayed: 50, wrong_guess: 50, delivered: 1, bounced: 1, complained: 2, locked: 1, verified: 1, receipt_redeemed: 1, delivery_failed: 1
    })
  })

  t.test('past the cap a scope forgets its oldest stories, and only its own', async (t) => {
    const log = makeLog({ retentionMs: DAY, maxPerScope: 3 })
    const tenant = `capped-${++ids}`
    const other = freshId(`other-${ids}`)
    log.start(other, 'backend', requested)
    // Each requestId sorts before the one started before it: the order kept is the order started, not the names'.
    const mine = Array.from({ length: 5 }, (_, i) => ({ ...freshId(tenant), requestId: `${'zyxwv'[i] ?? ''}-${ids}` }))
    const kept = async (): Promise<boolean[]> => await Promise.all(mine.map(async (id) => await log.read(id) !== null))
    for (const id of mine.slice(0, 4)) log.start(id, 'backend', requested)
    await log.flush()
    t.strictSame(await kept(), [false, true, true, true, false], 'one past the cap: the oldest goes')
    log.start(mine[4] as VerificationId, 'backend', requested)
    await log.flush()
    t.strictSame(await kept(), [false, false, true, true, true], 'the three most recent')
    t.not(await log.read(other), null, "another tenant's story stays")
  })

  t.test("its pages' dispatches forget only their own stories, past half the cap", async (t) => {
    const log = makeLog({ retentionMs: DAY, maxPerScope: 4 })
    const tenant = `paged-${++ids}`
    const backend = Array.from({ length: 4 }, () => freshId(tenant))
    for (const id of backend) log.start(id, 'backend', requested)
    const pages = Array.from({ length: 10 }, () => freshId(tenant))
    for (const id of pages) log.start(id, 'browser', requested)
    await log.flush()
    const kept = async (list: VerificationId[]): Promise<boolean[]> => await Promise.all(list.map(async (id) => await log.read(id) !== null))
    t.strictSame(await kept(backend), [true, true, true, true], 'a flood from the page leaves every backend story')
    t.equal(browserStories(4), 2)
    t.strictSame(await kept(pages), [...Array(8).fill(false), true, true], "the page's two most recent")
    const next = freshId(tenant)
    log.start(next, 'backend', requested)
    await log.flush()
    t.strictSame(await kept([...backend, next, ...pages.slice(8)]), [false, true, true, true, true, true, true], "a backend dispatch forgets the backend's oldest, not the page's")
    log.record(pages[9] as VerificationId, { type: 'verified', at })
    await log.flush()
    t.strictSame((await log.read(pages[9] as VerificationId))?.counts, { requested: 1, verified: 1 }, "a page's story takes events like any")
  })
}

t.test('memory', async (t) => {
  logSuite(t, (limits) => new MemoryVerificationLog(limits))

  t.test('a story is gone at the end of retention, on the injected clock', async (t) => {
    let now = 1_000_000
    const log = new MemoryVerificationLog({ retentionMs: 1000, maxPerScope: 100 }, { now: () => now })
    const id = freshId()
    log.start(id, 'backend', requested)
    now += 999
    log.record(id, { type: 'verified', at })
    t.strictSame((await log.read(id))?.counts, { requested: 1, verified: 1 }, 'the last millisecond')
    now += 1
    t.equal(await log.read(id), null, 'gone at its end')
    const next = freshId()
    log.start(next, 'backend', requested)
    t.equal(log.size('acme', 'live'), 1, 'a new story sweeps the expired ones')
  })
})

t.test('redis', redisTestOptions(), async (t) => {
  const { client, server } = await redisWithClients(t)
  logSuite(t, (limits) => new RedisVerificationLog(client, limits))

  t.test('keys carry the scope as their hash tag and expire with retention', async (t) => {
    const log = new RedisVerificationLog(client, { retentionMs: 5 * DAY, maxPerScope: 100 })
    const id = freshId('tagged')
    log.start(id, 'backend', requested)
    await log.flush()
    const page = freshId('tagged')
    log.start(page, 'browser', requested)
    await log.flush()
    for (const key of [`vlog:{tagged:live}:${id.requestId}`, 'vlog:{tagged:live}', `vlog:{tagged:live}:${page.requestId}`, 'vlog:browser:{tagged:live}']) {
      const ttl = await client.pttl(key)
      t.ok(ttl > 5 * DAY - 60_000 && ttl <= 5 * DAY, `${key} ttl ${ttl}`)
    }
  })

  t.test('a story past its listed events stays one bounded hash', async (t) => {
    const log = new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: 100 })
    const id = freshId('noisy')
    log.start(id, 'backend', requested)
    for (let i = 0; i < 50; i++) log.record(id, { type: 'delayed', at })
    for (let i = 0; i < 50; i++) log.record(id, { type: 'wrong_guess', at, reason: 'wrong_code' })
    await log.flush()
    // The listed events, `listed`, a count per type and the request time (`t0`).
    t.equal(await client.hlen(`vlog:{noisy:live}:${id.requestId}`), 1 + LISTED_PER_TYPE.delayed + LISTED_PER_TYPE.wrong_guess + 1 + 3 + 1)
  })

  t.test('a story goes at the end of retention', async (t) => {
    const log = new RedisVerificationLog(client, { retentionMs: 300, maxPerScope: 100 })
    const id = freshId()
    log.start(id, 'backend', requested)
    await log.flush()
    t.not(await log.read(id), null)
    await attemptUntil('the story to expire', async () => await log.read(id), (story) => story === null)
  })

  t.test('one write per turn: the events of a turn go in one script per scope', async (t) => {
    const log = new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: 100 })
    const scripts = async (): Promise<number> => (await client.info('commandstats')).split('\n')
      .filter((line) => /^cmdstat_eval(sha)?:/.test(line))
      .reduce((sum, line) => sum + Number(/calls=(\d+)/.exec(line)?.[1] ?? 0), 0)
    const before = await scripts()
    const stories = Array.from({ length: 20 }, () => freshId('batched'))
    for (const id of stories) { log.start(id, 'backend', requested); log.record(id, { type: 'sent', at, provider: 'smtp' }) }
    await log.flush()
    t.equal(await scripts() - before, 1, 'one script call for 40 events')
    t.strictSame((await log.read(stories[19] as VerificationId))?.counts, { requested: 1, sent: 1 })
  })

  t.test('events of many turns within the wait go in one write; a call\'s worth is written at once', async (t) => {
    const scripts = async (): Promise<number> => (await client.info('commandstats')).split('\n')
      .filter((line) => /^cmdstat_eval(sha)?:/.test(line))
      .reduce((sum, line) => sum + Number(/calls=(\d+)/.exec(line)?.[1] ?? 0), 0)
    // A wait no test outlasts: only the flush, or a full call, writes.
    const log = new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: 1000 }, undefined, { writeBehindMs: 600_000 })
    const before = await scripts()
    const stories = Array.from({ length: 20 }, () => freshId('gathered'))
    for (const id of stories) {
      log.start(id, 'backend', requested)
      await new Promise((resolve) => setImmediate(resolve))
    }
    t.equal(await scripts() - before, 0, 'nothing written before the wait ends')
    await log.flush()
    t.equal(await scripts() - before, 1, 'the events of 20 turns in one script call')
    const full = Array.from({ length: 256 }, () => freshId('gathered'))
    for (const id of full) log.start(id, 'backend', requested)
    await attemptUntil('the full call to be written', async () => await scripts() - before, (calls) => calls === 2)
    t.not(await new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: 1000 }).read(full[255] as VerificationId), null, 'written without a flush')
  })

  t.test('without a flush, events reach Redis after the wait by themselves', async (t) => {
    const log = new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: 100 })
    const reader = new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: 100 })
    const id = freshId()
    log.start(id, 'backend', requested)
    const answers = await attemptUntil('another instance to read the story', async () => await reader.read(id), (story) => story !== null)
    t.strictSame(answers.at(-1)?.counts, { requested: 1 })
  })

  t.test('the queue waiting for the next write is bounded: past it events are dropped and counted', async (t) => {
    const log = new RedisVerificationLog(client, { retentionMs: DAY, maxPerScope: MAX_BUFFERED_EVENTS * 2 })
    const stories = Array.from({ length: MAX_BUFFERED_EVENTS + 5 }, () => freshId('flooded'))
    for (const id of stories) log.start(id, 'backend', requested)
    await log.flush()
    t.equal(log.dropped(), 5)
    t.not(await log.read(stories[MAX_BUFFERED_EVENTS - 1] as VerificationId), null, 'the last one within the bound was written')
    t.equal(await log.read(stories[MAX_BUFFERED_EVENTS] as VerificationId), null, 'the first past it was not')
    log.start(stories[MAX_BUFFERED_EVENTS] as VerificationId, 'backend', requested)
    await log.flush()
    t.not(await log.read(stories[MAX_BUFFERED_EVENTS] as VerificationId), null, 'once written, the queue takes events again')
  })

  t.test('a write that fails loses its events, counted, and throws to nobody', async (t) => {
    const doomed = await connectFailFast(server.url)
    const log = new RedisVerificationLog(doomed, { retentionMs: DAY, maxPerScope: 100 })
    doomed.disconnect()
    log.start(freshId(), 'backend', requested)
    log.start(freshId(), 'backend', requested)
    await log.flush()
    t.equal(log.dropped(), 2)
  })
})
