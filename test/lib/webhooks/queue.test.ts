import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { MemoryWebhookQueue } from '../../../lib/webhooks/memory-queue.js'
import type { Delivery, WebhookQueue } from '../../../lib/webhooks/queue.js'
import { RedisWebhookQueue } from '../../../lib/webhooks/redis-queue.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../support/redis.js'

const HOUR = 3_600_000

function delivery (messageId: string, url = 'https://hooks.acme.test/otp'): Delivery {
  return { messageId, tenant: 'acme', url, type: 'verification.succeeded', body: `{"id":"${messageId}"}`, createdAtMs: Date.now(), attempts: 0 }
}

/** What every webhook queue does alike. Each test starts from an empty queue. */
function queueSuite (t: Test, makeQueue: () => Promise<WebhookQueue>): void {
  t.test('enqueue, claim, complete: each delivery once', async (t) => {
    const queue = await makeQueue()
    t.equal(await queue.enqueue([delivery('m1', 'https://a.test/'), delivery('m1', 'https://b.test/')]), true)
    const claimed = await queue.claim('c1', 10, HOUR)
    t.same(claimed.map((entry) => entry.delivery.url).sort(), ['https://a.test/', 'https://b.test/'])
    t.same(await queue.claim('c2', 10, HOUR), [], 'a claimed delivery is nobody else\'s')
    for (const entry of claimed) await queue.complete('c1', entry)
    t.same(await queue.claim('c1', 10, HOUR), [], 'completed deliveries are gone')
  })

  t.test('two consumers claiming at once never get the same delivery', async (t) => {
    const queue = await makeQueue()
    for (let i = 0; i < 30; i++) await queue.enqueue([delivery(`c${i}`)])
    const [a, b] = await Promise.all([queue.claim('a', 20, HOUR), queue.claim('b', 20, HOUR)])
    const ids = [...(a ?? []), ...(b ?? [])].map((entry) => entry.delivery.messageId)
    t.equal(ids.length, 30)
    t.equal(new Set(ids).size, 30)
  })

  t.test('max bounds a claim', async (t) => {
    const queue = await makeQueue()
    for (let i = 0; i < 5; i++) await queue.enqueue([delivery(`b${i}`)])
    t.equal((await queue.claim('c1', 2, HOUR)).length, 2)
    t.equal((await queue.claim('c1', 10, HOUR)).length, 3)
  })

  t.test('a retry comes back when it is due, with what the worker wrote', async (t) => {
    const queue = await makeQueue()
    await queue.enqueue([delivery('r1')])
    const [entry] = await queue.claim('c1', 10, HOUR)
    if (entry === undefined) throw new Error('nothing claimed')
    await queue.retry('c1', entry, { ...entry.delivery, attempts: 1, lastError: 'HTTP 500' }, Date.now() + 300)
    t.same(await queue.claim('c1', 10, HOUR), [], 'not yet due')
    await sleep(500)
    const [again] = await queue.claim('c2', 10, HOUR)
    t.match(again?.delivery, { messageId: 'r1', attempts: 1, lastError: 'HTTP 500' }, 'due: any consumer may take it')
  })

  t.test('a delivery held past stuckMs is taken over, and its first holder can no longer settle it', async (t) => {
    const queue = await makeQueue()
    await queue.enqueue([delivery('s1')])
    const [held] = await queue.claim('dead', 10, HOUR)
    if (held === undefined) throw new Error('nothing claimed')
    t.same(await queue.claim('alive', 10, 60_000), [], 'not stuck yet')
    await sleep(250)
    const [taken] = await queue.claim('alive', 10, 200)
    t.equal(taken?.delivery.messageId, 's1', 'taken over')
    await queue.retry('dead', held, held.delivery, Date.now())
    await queue.complete('dead', held)
    await queue.bury('dead', held, held.delivery)
    t.same(await queue.deadLetters(10), [], 'the old holder could not bury it')
    t.same(await queue.claim('other', 10, HOUR), [], 'nor put it back')
    if (taken !== undefined) await queue.complete('alive', taken)
    t.same(await queue.claim('other', 10, 0), [], 'the new holder settled it')
  })

  t.test('dead letters: listed newest first, replayed with a new retry period', async (t) => {
    const queue = await makeQueue()
    await queue.enqueue([delivery('d1')])
    await queue.enqueue([delivery('d2')])
    for (const entry of await queue.claim('c1', 10, HOUR)) {
      await queue.bury('c1', entry, { ...entry.delivery, attempts: 7, lastError: 'HTTP 503' })
      await sleep(5)
    }
    const letters = await queue.deadLetters(10)
    t.same(letters.map((letter) => letter.delivery.messageId), ['d2', 'd1'])
    t.match(letters[0], { deadAtMs: Number, delivery: { attempts: 7, lastError: 'HTTP 503' } })
    t.same(await queue.claim('c1', 10, HOUR), [], 'dead letters are not delivered')

    t.equal(await queue.replay([letters[1]?.id ?? '', 'no-such-id']), 1)
    t.equal(await queue.replay([letters[1]?.id ?? '']), 0, 'a letter replays once')
    const [revived] = await queue.claim('c1', 10, HOUR)
    t.match(revived?.delivery, { messageId: 'd1', attempts: 0 })
    t.notOk(revived?.delivery.lastError)
    t.ok((revived?.delivery.createdAtMs ?? 0) >= (letters[1]?.deadAtMs ?? Infinity), 'a new retry period')
    t.same((await queue.deadLetters(10)).map((letter) => letter.delivery.messageId), ['d2'])
    t.equal(await queue.replay(null), 1, 'replay all')
    t.same(await queue.deadLetters(10), [])
  })

  t.test('once: the first event per key is queued, later ones are not until the key expires', async (t) => {
    const queue = await makeQueue()
    t.equal(await queue.enqueue([delivery('o1')], { key: 'quota:acme:live:w1:80', ttlMs: 300 }), true)
    t.equal(await queue.enqueue([delivery('o2')], { key: 'quota:acme:live:w1:80', ttlMs: 300 }), false)
    t.equal(await queue.enqueue([delivery('o3')], { key: 'quota:acme:live:w1:100', ttlMs: 300 }), true, 'another key')
    await sleep(450)
    t.equal(await queue.enqueue([delivery('o4')], { key: 'quota:acme:live:w1:80', ttlMs: 300 }), true, 'after the key expired')
    t.same((await queue.claim('c1', 10, HOUR)).map((entry) => entry.delivery.messageId).sort(), ['o1', 'o3', 'o4'])
  })
}

t.test('memory', async (t) => {
  queueSuite(t, async () => new MemoryWebhookQueue())

  t.test('is bounded: past its cap, enqueue fails (the event is logged as lost)', async (t) => {
    const queue = new MemoryWebhookQueue({ maxDeliveries: 2 })
    await queue.enqueue([delivery('a'), delivery('b')])
    await t.rejects(queue.enqueue([delivery('c')]), /holds 2 deliveries/)
  })
})

t.test('redis', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = await connectFailFast(redis.url)
  t.teardown(() => { client.disconnect() })
  queueSuite(t, async () => {
    await client.flushall()
    return new RedisWebhookQueue(client)
  })

  t.test('survives a new process (a new queue object) and a lost consumer group', async (t) => {
    await client.flushall()
    await new RedisWebhookQueue(client).enqueue([delivery('p1')])
    t.same((await new RedisWebhookQueue(client).claim('c1', 10, HOUR)).map((entry) => entry.delivery.messageId), ['p1'], 'queued before any consumer existed')
    const queue = new RedisWebhookQueue(client)
    await queue.claim('c1', 10, HOUR)
    await client.flushall()
    await queue.enqueue([delivery('p2')])
    t.same((await queue.claim('c1', 10, HOUR)).map((entry) => entry.delivery.messageId), ['p2'], 'the group is made again after Redis lost it')
  })

  t.test('every key shares the {webhooks} hash tag', async (t) => {
    await client.flushall()
    const queue = new RedisWebhookQueue(client)
    await queue.enqueue([delivery('k1')], { key: 'quota:acme:live:w:80', ttlMs: 60_000 })
    const [entry] = await queue.claim('c1', 10, HOUR)
    if (entry !== undefined) await queue.retry('c1', entry, entry.delivery, Date.now() + HOUR)
    await queue.enqueue([delivery('k2')])
    const [other] = await queue.claim('c1', 10, HOUR)
    if (other !== undefined) await queue.bury('c1', other, other.delivery)
    const keys = await client.keys('*')
    t.same(keys.sort(), ['webhooks:{webhooks}:dead', 'webhooks:{webhooks}:once:quota:acme:live:w:80', 'webhooks:{webhooks}:retry', 'webhooks:{webhooks}:stream'])
  })
})
