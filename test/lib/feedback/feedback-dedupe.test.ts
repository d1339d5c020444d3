import { mock } from 'node:test'
import t, { type Test } from 'tap'
import { DEDUPE_TTL_MS } from '../../../lib/feedback/ses-feedback.js'
import type { FeedbackDedupe } from '../../../lib/state/feedback-dedupe.js'
import { MEMORY_DEDUPE_ENTRIES, MemoryFeedbackDedupe } from '../../../lib/state/memory/feedback-dedupe.js'
import { RedisFeedbackDedupe } from '../../../lib/state/redis/feedback-dedupe.js'
import { feedbackKey } from '../../../lib/state/redis/keys.js'
import { redisTestOptions, redisWithClients } from '../../support/redis.js'

let messages = 0
function freshMessageId (): string {
  return `message-${++messages}-${process.pid}`
}

/** What both stores of handled SNS MessageIds do alike (docs/delivery.md: "A message is handled once"). */
function dedupeSuite (t: Test, makeDedupe: () => FeedbackDedupe): void {
  t.test('a MessageId is new once: SNS\'s second delivery is a duplicate', async (t) => {
    const dedupe = makeDedupe()
    const id = freshMessageId()
    t.equal(await dedupe.claim(id), true, 'the first delivery is new')
    t.equal(await dedupe.claim(id), false, 'the second is a duplicate')
    t.equal(await dedupe.claim(id), false, 'and every later one')
    t.equal(await dedupe.claim(freshMessageId()), true, 'another MessageId is another message')
  })

  t.test('of 20 concurrent deliveries of one message exactly one is new', async (t) => {
    const dedupe = makeDedupe()
    const id = freshMessageId()
    const claims = await Promise.all(Array.from({ length: 20 }, async () => await dedupe.claim(id)))
    t.equal(claims.filter((claim) => claim).length, 1, 'one delivery is new')
  })

  t.test('a released MessageId (its handling failed) is new again for SNS\'s retry, and others stay handled', async (t) => {
    const dedupe = makeDedupe()
    const failed = freshMessageId()
    const handled = freshMessageId()
    t.equal(await dedupe.claim(failed), true)
    t.equal(await dedupe.claim(handled), true)
    await dedupe.release(failed)
    t.equal(await dedupe.claim(failed), true, 'the retry is handled')
    t.equal(await dedupe.claim(failed), false, 'once')
    t.equal(await dedupe.claim(handled), false, 'releasing one id forgets no other')
  })
}

t.test('in memory', async (t) => {
  dedupeSuite(t, () => new MemoryFeedbackDedupe(DEDUPE_TTL_MS))

  t.test('a MessageId is remembered for the replay window, and forgotten after it', async (t) => {
    // The in-process store reads Date; node:test's MockTimers moves it.
    mock.timers.enable({ apis: ['Date'], now: Date.parse('2026-11-28T07:00:00Z') })
    t.teardown(() => { mock.timers.reset() })
    const dedupe = new MemoryFeedbackDedupe(DEDUPE_TTL_MS)
    const id = freshMessageId()
    t.equal(await dedupe.claim(id), true)
    mock.timers.tick(DEDUPE_TTL_MS - 1)
    t.equal(await dedupe.claim(id), false, 'a replay just inside the window is a duplicate')
    mock.timers.tick(1)
    t.equal(await dedupe.claim(id), true, 'past the window (the message is too old to verify anyway) the id is forgotten')
  })

  t.test(`the last ${MEMORY_DEDUPE_ENTRIES} MessageIds are remembered, the oldest forgotten past them`, async (t) => {
    const dedupe = new MemoryFeedbackDedupe(DEDUPE_TTL_MS)
    const ids = Array.from({ length: MEMORY_DEDUPE_ENTRIES + 1 }, (_, index) => `bulk-${index}`)
    for (const id of ids) await dedupe.claim(id)
    t.equal(await dedupe.claim(ids[1]!), false, `the ${MEMORY_DEDUPE_ENTRIES}th newest is a duplicate`)
    t.equal(await dedupe.claim(ids.at(-1)!), false, 'the newest is a duplicate')
    t.equal(await dedupe.claim(ids[0]!), true, 'the one before them is forgotten')
  })
})

t.test('on Redis', redisTestOptions(), async (t) => {
  const { client, other } = await redisWithClients(t)
  dedupeSuite(t, () => new RedisFeedbackDedupe(client, DEDUPE_TTL_MS))

  t.test('every instance shares the MessageIds handled, for the replay window', async (t) => {
    const id = freshMessageId()
    t.equal(await new RedisFeedbackDedupe(client, DEDUPE_TTL_MS).claim(id), true, 'one instance handles it')
    t.equal(await new RedisFeedbackDedupe(other, DEDUPE_TTL_MS).claim(id), false, 'another instance, on its own connection, sees a duplicate')
    // Redis's own clock decides the expiry: the key's lifetime is checked, not waited out.
    const left = await client.pttl(feedbackKey(id))
    t.ok(left > DEDUPE_TTL_MS - 60_000 && left <= DEDUPE_TTL_MS, `remembered for the replay window (${left} ms left of ${DEDUPE_TTL_MS})`)
  })
})
