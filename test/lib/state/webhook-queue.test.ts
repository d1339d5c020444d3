import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { MemoryWebhookQueue } from '../../../lib/state/memory/webhook-queue.js'
import type { ClaimedDelivery, Delivery, WebhookQueue } from '../../../lib/state/webhook-queue.js'
import { RedisWebhookQueue } from '../../../lib/state/redis/webhook-queue.js'
import { redisTestOptions, redisWithClients } from '../../support/redis.js'
import { until } from '../../support/wait.js'

const HOUR = 3_600_000

function delivery (messageId: string, url = 'https://hooks.acme.test/otp', tenant = 'acme'): Delivery {
  return { messageId, tenant, url, type: 'verification.succeeded', body: `{"id":"${messageId}"}`, createdAtMs: Date.now(), attempts: 0 }
}

/** The queue's clock: real time, moved on by the tests that need a retry to fall due. */
interface Clock {
  now: () => number
  advance: (ms: number) => void
}

function clock (): Clock {
  let offset = 0
  return { now: () => Date.now() + offset, advance: (ms) => { offset += ms } }
}

interface QueueOptions {
  perTenant?: number
  clock?: Clock
}

type MakeQueue = (options?: QueueOptions) => Promise<WebhookQueue>

const ids = (claimed: readonly ClaimedDelivery[]): string[] => claimed.map((entry) => entry.delivery.messageId).sort()

/** Enqueues `events` events of `tenant`, each for `endpoints` endpoints. */
async function flood (queue: WebhookQueue, tenant: string, events: number, endpoints = 1): Promise<number> {
  let overflowed = 0
  for (let i = 0; i < events; i++) {
    const deliveries = Array.from({ length: endpoints }, (_, endpoint) => delivery(`${tenant}-${i}`, `https://hooks.${tenant}.test/${endpoint}`, tenant))
    overflowed += (await queue.enqueue(deliveries)).overflowed
  }
  return overflowed
}

/** What every webhook queue does alike. Each test starts from an empty queue. */
function queueSuite (t: Test, makeQueue: MakeQueue): void {
  t.test('enqueue, claim, complete: each delivery once', async (t) => {
    const queue = await makeQueue()
    t.same(await queue.enqueue([delivery('m1', 'https://a.test/'), delivery('m1', 'https://b.test/')]), { queued: true, overflowed: 0 })
    const claimed = await queue.claim('c1', 10, HOUR)
    t.same(claimed.map((entry) => entry.delivery.url).sort(), ['https://a.test/', 'https://b.test/'])
    t.same(await queue.claim('c2', 10, HOUR), [], 'a claimed delivery is nobody else\'s')
    for (const entry of claimed) await queue.complete('c1', entry)
    t.same(await queue.claim('c1', 10, HOUR), [], 'completed deliveries are gone')
    t.equal((await queue.backlog('acme')).depth, 0)
  })

  t.test('backlog: the depth and the oldest delivery queued, waiting, held or due for a retry', async (t) => {
    const queue = await makeQueue()
    t.same(await queue.backlog('acme'), { depth: 0, oldestCreatedAtMs: null }, 'nothing queued')
    const at = (messageId: string, createdAtMs: number): Delivery => ({ ...delivery(messageId), createdAtMs })
    await queue.enqueue([at('old', 1_000_000)])
    await queue.enqueue([at('mid', 2_000_000)])
    await queue.enqueue([{ ...at('new', 3_000_000), body: '{"createdAtMs":5}' }])
    await queue.enqueue([{ ...delivery('other', undefined, 'globex'), createdAtMs: 500 }])
    t.same(await queue.backlog('acme'), { depth: 3, oldestCreatedAtMs: 1_000_000 }, 'waiting: the oldest is the earliest queued (never a value inside a body)')
    const claimed = await queue.claim('c1', 10, HOUR, (tenant) => tenant === 'acme' ? 10 : 0)
    const old = claimed.find((entry) => entry.delivery.messageId === 'old')
    const mid = claimed.find((entry) => entry.delivery.messageId === 'mid')
    if (old === undefined || mid === undefined) throw new Error('not claimed')
    t.same(await queue.backlog('acme'), { depth: 3, oldestCreatedAtMs: 1_000_000 }, 'held deliveries count')
    await queue.retry('c1', old, { ...old.delivery, attempts: 1, lastError: 'HTTP 503' }, Date.now() + HOUR)
    t.same(await queue.backlog('acme'), { depth: 3, oldestCreatedAtMs: 1_000_000 }, 'a delivery due for a retry counts')
    await queue.complete('c1', mid)
    const retried = await queue.backlog('acme')
    t.equal(retried.depth, 2)
    t.equal(retried.oldestCreatedAtMs, 1_000_000)
    t.same(await queue.backlog('globex'), { depth: 1, oldestCreatedAtMs: 500 }, 'each tenant\'s own')
  })

  t.test('the deliveries of one enqueue are one tenant\'s', async (t) => {
    const queue = await makeQueue()
    await t.rejects(queue.enqueue([delivery('x1', undefined, 'acme'), delivery('x1', undefined, 'globex')]), RangeError)
    t.same(await queue.enqueue([]), { queued: false, overflowed: 0 })
  })

  t.test('two consumers claiming at once never get the same delivery', async (t) => {
    const queue = await makeQueue()
    for (let i = 0; i < 30; i++) await queue.enqueue([delivery(`c${i}`, undefined, i % 2 === 0 ? 'acme' : 'globex')])
    const [a, b] = await Promise.all([queue.claim('a', 20, HOUR), queue.claim('b', 20, HOUR)])
    const claimed = [...(a ?? []), ...(b ?? [])].map((entry) => entry.delivery.messageId)
    t.equal(claimed.length, 30)
    t.equal(new Set(claimed).size, 30)
  })

  t.test('max bounds a claim', async (t) => {
    const queue = await makeQueue()
    for (let i = 0; i < 5; i++) await queue.enqueue([delivery(`b${i}`)])
    t.equal((await queue.claim('c1', 2, HOUR)).length, 2)
    t.equal((await queue.claim('c1', 10, HOUR)).length, 3)
  })

  t.test('a retry comes back when it is due, with what the worker wrote', async (t) => {
    const time = clock()
    const queue = await makeQueue({ clock: time })
    await queue.enqueue([delivery('r1')])
    const [entry] = await queue.claim('c1', 10, HOUR)
    if (entry === undefined) throw new Error('nothing claimed')
    await queue.retry('c1', entry, { ...entry.delivery, attempts: 1, lastError: 'HTTP 500' }, time.now() + 60_000)
    t.same(await queue.claim('c1', 10, HOUR), [], 'not yet due')
    t.equal((await queue.backlog('acme')).depth, 1, 'a retry is still queued')
    time.advance(60_000)
    const [again] = await queue.claim('c2', 10, HOUR)
    t.match(again?.delivery, { messageId: 'r1', attempts: 1, lastError: 'HTTP 500' }, 'due: any consumer may take it')
  })

  t.test('a delivery held past stuckMs is taken over, and its first holder can no longer settle it', async (t) => {
    const queue = await makeQueue()
    await queue.enqueue([delivery('s1')])
    const [held] = await queue.claim('dead', 10, HOUR)
    if (held === undefined) throw new Error('nothing claimed')
    t.same(await queue.claim('alive', 10, 60_000), [], 'not stuck yet')
    // Idle time is measured by the store's own clock (Redis's for Redis): waiting longer than stuckMs is enough.
    await sleep(250)
    const [taken] = await queue.claim('alive', 10, 200)
    t.equal(taken?.delivery.messageId, 's1', 'taken over')
    await queue.retry('dead', held, held.delivery, Date.now())
    await queue.complete('dead', held)
    await queue.bury('dead', held, held.delivery)
    t.same(await queue.deadLetters(null, 10), [], 'the old holder could not bury it')
    t.same(await queue.claim('other', 10, HOUR), [], 'nor put it back')
    if (taken !== undefined) await queue.complete('alive', taken)
    t.same(await queue.claim('other', 10, 0), [], 'the new holder settled it')
  })

  t.test('dead letters: per tenant, listed newest first, replayed with a new retry period', async (t) => {
    const queue = await makeQueue()
    await queue.enqueue([delivery('d1')])
    await queue.enqueue([delivery('d2')])
    await queue.enqueue([delivery('g1', undefined, 'globex')])
    const claimed = await queue.claim('c1', 10, HOUR)
    const inOrder = [...claimed].sort((a, b) => a.delivery.messageId.localeCompare(b.delivery.messageId))
    for (const entry of inOrder) await queue.bury('c1', entry, { ...entry.delivery, attempts: 7, lastError: 'HTTP 503' })
    const letters = await queue.deadLetters('acme', 10)
    t.same(letters.map((letter) => letter.delivery.messageId), ['d2', 'd1'])
    t.match(letters[0], { id: /^acme\//, deadAtMs: Number, reason: 'failed', delivery: { attempts: 7, lastError: 'HTTP 503' } })
    t.same((await queue.deadLetters('globex', 10)).map((letter) => letter.delivery.messageId), ['g1'])
    t.same(ids((await queue.deadLetters(null, 10)).map((letter) => ({ entryId: letter.id, delivery: letter.delivery }))), ['d1', 'd2', 'g1'], 'every tenant\'s')
    t.equal((await queue.deadLetters(null, 2)).length, 2, 'the limit holds across tenants')
    t.same(await queue.claim('c1', 10, HOUR), [], 'dead letters are not delivered')

    const d1 = letters[1]?.id ?? ''
    t.same(await queue.replay(null, [d1, 'acme/1-1', 'nobody/1-1', 'no-slash']), { replayed: 1, unknown: ['acme/1-1', 'nobody/1-1', 'no-slash'], full: 0 })
    t.same(await queue.replay(null, [d1]), { replayed: 0, unknown: [d1], full: 0 }, 'a letter replays once')
    t.same(await queue.replay('globex', [letters[0]?.id ?? '']), { replayed: 0, unknown: [letters[0]?.id ?? ''], full: 0 }, 'an id of another tenant than the one named is not replayed')
    const [revived] = await queue.claim('c1', 10, HOUR)
    t.match(revived?.delivery, { messageId: 'd1', attempts: 0 })
    t.notOk(revived?.delivery.lastError)
    t.ok((revived?.delivery.createdAtMs ?? 0) >= (letters[1]?.deadAtMs ?? Infinity), 'a new retry period')
    t.same((await queue.deadLetters('acme', 10)).map((letter) => letter.delivery.messageId), ['d2'])
    t.same(await queue.replay('acme', null), { replayed: 1, unknown: [], full: 0 }, 'replay all of one tenant')
    t.same(ids((await queue.deadLetters(null, 10)).map((letter) => ({ entryId: letter.id, delivery: letter.delivery }))), ['g1'], 'the other tenant\'s stay')
    t.same(await queue.replay(null, null), { replayed: 1, unknown: [], full: 0 }, 'replay every tenant\'s')
    t.same(await queue.deadLetters(null, 10), [])
  })

  t.test('once: the first event per key is queued, later ones are not until the key expires', async (t) => {
    const queue = await makeQueue()
    // Long enough that the second event comes within it on any machine; the key is then waited out.
    const ttlMs = 4000
    const started = Date.now()
    t.same(await queue.enqueue([delivery('o1')], { key: 'quota:acme:live:w1:80', ttlMs }), { queued: true, overflowed: 0 })
    t.same(await queue.enqueue([delivery('o2')], { key: 'quota:acme:live:w1:80', ttlMs }), { queued: false, overflowed: 0 })
    t.equal((await queue.enqueue([delivery('o3')], { key: 'quota:acme:live:w1:100', ttlMs })).queued, true, 'another key')
    let queuedAgainAfterMs = -1
    await until('the key to expire and the event to be queued again', async () => {
      if ((await queue.enqueue([delivery('o4')], { key: 'quota:acme:live:w1:80', ttlMs })).queued) queuedAgainAfterMs = Date.now() - started
      return queuedAgainAfterMs >= 0
    })
    t.ok(queuedAgainAfterMs >= ttlMs - 5, `queued again once the key expired, ${queuedAgainAfterMs} ms after the first (ttl ${ttlMs} ms)`)
    t.same(ids(await queue.claim('c1', 10, HOUR)), ['o1', 'o3', 'o4'])
  })

  t.test('tenants are served in turn: a claim shares its max among the tenants with work', async (t) => {
    const queue = await makeQueue()
    await flood(queue, 'noisy', 50)
    await queue.enqueue([delivery('calm-1', undefined, 'calm')])
    await queue.enqueue([delivery('quiet-1', undefined, 'quiet')])
    const claimed = await queue.claim('c1', 10, HOUR)
    t.equal(claimed.length, 10, 'the claim is filled')
    t.same(claimed.filter((entry) => entry.delivery.tenant !== 'noisy').map((entry) => entry.delivery.messageId).sort(), ['calm-1', 'quiet-1'], 'the calm tenants\' deliveries are in the first claim')
    const limited = await queue.claim('c1', 10, HOUR, (tenant) => tenant === 'noisy' ? 3 : 10)
    t.equal(limited.length, 3, 'at most room(tenant) of a tenant\'s')
    t.same(await queue.claim('c1', 10, HOUR, () => 0), [], 'nothing without room')
  })

  t.test('a backlog of thousands never delays another tenant\'s delivery', async (t) => {
    const queue = await makeQueue()
    await flood(queue, 'noisy', 250, 20)
    t.equal((await queue.backlog('noisy')).depth, 5000)
    await queue.enqueue([delivery('calm-1', undefined, 'calm')])
    const claimed = await queue.claim('c1', 8, HOUR, () => 8)
    t.ok(claimed.some((entry) => entry.delivery.messageId === 'calm-1'), 'the calm tenant\'s delivery is claimed at once')
  })

  t.test('at its cap, a tenant\'s longest-waiting deliveries go to its own dead letters, never another tenant\'s', async (t) => {
    const time = clock()
    const queue = await makeQueue({ perTenant: 5, clock: time })
    await flood(queue, 'calm', 3)
    await flood(queue, 'noisy', 4)
    const held = await queue.claim('c1', 2, HOUR, (tenant) => tenant === 'noisy' ? 2 : 0)
    t.same(ids(held), ['noisy-0', 'noisy-1'])
    const [retried, kept] = held.sort((a, b) => a.delivery.messageId.localeCompare(b.delivery.messageId))
    if (retried === undefined || kept === undefined) throw new Error('two claimed')
    await queue.retry('c1', retried, { ...retried.delivery, attempts: 1 }, time.now() + HOUR)
    // noisy: noisy-0 due for a retry, noisy-1 held, noisy-2 and noisy-3 waiting: 4 of 5.
    t.same(await queue.enqueue([delivery('noisy-4', undefined, 'noisy')]), { queued: true, overflowed: 0 }, 'up to the cap')
    t.same(await queue.enqueue([delivery('noisy-5', undefined, 'noisy')]), { queued: true, overflowed: 1 })
    t.same((await queue.deadLetters('noisy', 10)).map((letter) => [letter.delivery.messageId, letter.reason]), [['noisy-0', 'overflow']], 'the retry first')
    t.same(await queue.enqueue([delivery('noisy-6', undefined, 'noisy'), delivery('noisy-6', 'https://hooks.noisy.test/1', 'noisy')]), { queued: true, overflowed: 2 })
    t.same((await queue.deadLetters('noisy', 10)).map((letter) => [letter.delivery.messageId, letter.reason]).reverse(), [['noisy-0', 'overflow'], ['noisy-2', 'overflow'], ['noisy-3', 'overflow']], 'then the oldest waiting')
    t.equal((await queue.backlog('noisy')).depth, 5, 'the tenant holds its cap')
    t.equal((await queue.backlog('calm')).depth, 3, 'the other tenant keeps everything')
    t.same(await queue.deadLetters('calm', 10), [])
    await queue.complete('c1', kept)
    const rest = await queue.claim('c2', 10, HOUR)
    t.same(ids(rest), ['calm-0', 'calm-1', 'calm-2', 'noisy-4', 'noisy-5', 'noisy-6', 'noisy-6'], 'a held delivery is never pushed out; what was not is delivered')
  })

  t.test('dead letters are capped per tenant; replay waits for room in the tenant\'s queue', async (t) => {
    const queue = await makeQueue({ perTenant: 3 })
    await flood(queue, 'calm', 1)
    const calm = await queue.claim('c1', 10, HOUR)
    for (const entry of calm) await queue.bury('c1', entry, entry.delivery)
    t.equal(await flood(queue, 'noisy', 9), 6)
    t.same((await queue.deadLetters('noisy', 10)).map((letter) => letter.delivery.messageId), ['noisy-5', 'noisy-4', 'noisy-3'], 'the newest 3 of 6 dead letters')
    t.same((await queue.deadLetters('calm', 10)).map((letter) => letter.delivery.messageId), ['calm-0'], 'another tenant\'s dead letters stay')
    t.same(await queue.replay('noisy', null), { replayed: 0, unknown: [], full: 3 }, 'no room: nothing replayed, nothing lost')
    t.equal((await queue.deadLetters('noisy', 10)).length, 3)
    const one = await queue.claim('c1', 1, HOUR)
    for (const entry of one) await queue.complete('c1', entry)
    t.same(await queue.replay('noisy', null), { replayed: 1, unknown: [], full: 2 }, 'as much as there is room for')
  })
}

t.test('memory', async (t) => {
  queueSuite(t, async (options = {}) => new MemoryWebhookQueue({ perTenant: options.perTenant, now: options.clock?.now }))
})

t.test('redis', redisTestOptions(), async (t) => {
  const { client } = await redisWithClients(t)
  queueSuite(t, async (options = {}) => {
    await client.flushall()
    return new RedisWebhookQueue(client, { perTenant: options.perTenant, now: options.clock?.now })
  })

  t.test('survives a new process (a new queue object) and Redis losing its data', async (t) => {
    await client.flushall()
    await new RedisWebhookQueue(client).enqueue([delivery('p1')])
    t.same(ids(await new RedisWebhookQueue(client).claim('c1', 10, HOUR)), ['p1'], 'queued before any consumer existed')
    const queue = new RedisWebhookQueue(client)
    await queue.claim('c1', 10, HOUR)
    await client.flushall()
    await queue.enqueue([delivery('p2')])
    t.same(ids(await queue.claim('c1', 10, HOUR)), ['p2'], 'the group is made again after Redis lost it')
  })

  t.test('keys: per tenant, with the tenant in the hash tag; an emptied queue leaves the index and its keys', async (t) => {
    await client.flushall()
    const queue = new RedisWebhookQueue(client)
    await queue.enqueue([delivery('k1')], { key: 'quota:acme:live:w:80', ttlMs: 60_000 })
    const [entry] = await queue.claim('c1', 10, HOUR)
    if (entry !== undefined) await queue.retry('c1', entry, entry.delivery, Date.now() + HOUR)
    await queue.enqueue([delivery('k2')])
    const [other] = await queue.claim('c1', 10, HOUR)
    if (other !== undefined) await queue.bury('c1', other, other.delivery)
    t.same((await client.keys('*')).sort(), [
      'webhooks:{webhooks:acme}:dead', 'webhooks:{webhooks:acme}:once:quota:acme:live:w:80', 'webhooks:{webhooks:acme}:retry', 'webhooks:{webhooks:acme}:stream',
      'webhooks:{webhooks}:dead-tenants', 'webhooks:{webhooks}:tenants', 'webhooks:{webhooks}:version'
    ])
    t.same(await client.zrange('webhooks:{webhooks}:tenants', '0', '-1'), ['acme'], 'indexed while it has work')
    await client.zadd('webhooks:{webhooks:acme}:retry', 0, (await client.zrange('webhooks:{webhooks:acme}:retry', '0', '0'))[0] ?? '')
    const [due] = await queue.claim('c1', 10, HOUR)
    if (due !== undefined) await queue.complete('c1', due)
    t.same(await queue.claim('c1', 10, HOUR), [])
    t.same(await client.zrange('webhooks:{webhooks}:tenants', '0', '-1'), [], 'an empty queue leaves the index')
    t.equal(await client.exists('webhooks:{webhooks:acme}:stream', 'webhooks:{webhooks:acme}:retry'), 0, 'and its keys go')
    await queue.enqueue([delivery('k3')])
    t.same(ids(await queue.claim('c1', 10, HOUR)), ['k3'], 'new work indexes it again')
  })

  t.test('an emptied tenant is unindexed only if no work came meanwhile', async (t) => {
    await client.flushall()
    const other = new RedisWebhookQueue(client)
    // The client as the queue sees it, except that work arrives between the claim that found the
    // queue empty and the removal from the index: the worst moment.
    const racing = new Proxy(client, {
      get (target, name) {
        const value: unknown = Reflect.get(target, name, target)
        if (name !== 'emailOtpWebhookUnindex' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value
        return async (...args: unknown[]) => {
          await other.enqueue([delivery('v2')])
          return await (value as (...args: unknown[]) => Promise<unknown>).apply(target, args)
        }
      }
    })
    const queue = new RedisWebhookQueue(racing)
    await queue.enqueue([delivery('v1')])
    for (const entry of await queue.claim('c1', 10, HOUR)) await queue.complete('c1', entry)
    t.same(await queue.claim('c1', 10, HOUR), [], 'found empty')
    t.not(await client.zscore('webhooks:{webhooks}:tenants', 'acme'), null, 'still indexed: work came meanwhile')
    t.same(ids(await queue.claim('c1', 10, HOUR)), ['v2'], 'and it is delivered')
  })

  t.test('a flood stays within the cap in Redis: stream and retries together, and the dead letters', async (t) => {
    await client.flushall()
    const queue = new RedisWebhookQueue(client, { perTenant: 100 })
    await queue.enqueue([delivery('calm-1', undefined, 'calm')])
    t.equal(await flood(queue, 'noisy', 250, 20), 4900)
    for (const entry of await queue.claim('c1', 20, HOUR, (tenant) => tenant === 'noisy' ? 20 : 0)) await queue.retry('c1', entry, entry.delivery, Date.now() + HOUR)
    await flood(queue, 'noisy', 10, 20)
    const [stream, retries, dead] = await Promise.all([client.xlen('webhooks:{webhooks:noisy}:stream'), client.zcard('webhooks:{webhooks:noisy}:retry'), client.xlen('webhooks:{webhooks:noisy}:dead')])
    t.ok(stream + retries <= 100, `stream ${stream} + retries ${retries} ≤ 100`)
    t.equal(dead, 100, 'the dead letters hold their cap')
    t.equal(await client.xlen('webhooks:{webhooks:calm}:stream'), 1, 'the calm tenant lost nothing')
    t.equal(await client.exists('webhooks:{webhooks:calm}:dead'), 0)
  })

  t.test('deliveries left in the shared stream of earlier versions are drained into the tenants\' queues', async (t) => {
    await client.flushall()
    // The old layout, as the previous version wrote it: one stream with group `workers`, a
    // retry set, a dead stream. One entry was claimed by a consumer that is gone.
    const old = { stream: 'webhooks:{webhooks}:stream', retry: 'webhooks:{webhooks}:retry', dead: 'webhooks:{webhooks}:dead' }
    await client.xgroup('CREATE', old.stream, 'workers', '0', 'MKSTREAM')
    for (const item of [delivery('old-held'), delivery('old-1'), delivery('old-2', undefined, 'globex')]) await client.xadd(old.stream, '*', 'd', JSON.stringify(item))
    await client.xreadgroup('GROUP', 'workers', 'gone-instance', 'COUNT', 1, 'STREAMS', old.stream, '>')
    const dueLater = Date.now() + HOUR
    const oldRetry = JSON.stringify({ ...delivery('old-retry'), attempts: 2, lastError: 'HTTP 500' })
    await client.zadd(old.retry, dueLater, oldRetry)
    await client.xadd(old.dead, '*', 'd', JSON.stringify({ ...delivery('old-dead', undefined, 'globex'), attempts: 9, lastError: 'HTTP 502' }))
    await client.xadd(old.stream, '*', 'junk', 'not a delivery')

    const queue = new RedisWebhookQueue(client)
    t.same(await queue.migrate('new-instance', 60_000), new Map(), 'nothing overflowed')
    t.same(ids(await queue.claim('c1', 10, HOUR)), ['old-1', 'old-2'], 'waiting entries: in their tenants\' queues')
    t.match(await client.xpending(old.stream, 'workers'), [1, String, String, [['gone-instance', '1']]], 'the entry its old holder may still settle stays')
    t.equal(await client.zscore('webhooks:{webhooks:acme}:retry', oldRetry), String(dueLater), 'a retry keeps its due time')
    t.match(await queue.deadLetters('globex', 10), [{ id: /^globex\//, reason: 'failed', delivery: { messageId: 'old-dead', attempts: 9, lastError: 'HTTP 502' } }], 'dead letters: the tenant\'s')
    t.equal(await client.exists(old.retry, old.dead), 0, 'drained keys are gone')

    await sleep(250)
    t.same(await new RedisWebhookQueue(client).migrate('new-instance', 200), new Map(), 'once its holder is taken for gone')
    t.same(ids(await queue.claim('c1', 10, HOUR)), ['old-held'])
    t.equal(await client.exists(old.stream, old.retry, old.dead), 0, 'nothing left of the old layout')
  })

  t.test('a drain into a full tenant queue pushes out that tenant\'s longest waiting, counted', async (t) => {
    await client.flushall()
    const queue = new RedisWebhookQueue(client, { perTenant: 3 })
    await flood(queue, 'acme', 3)
    await client.xgroup('CREATE', 'webhooks:{webhooks}:stream', 'workers', '0', 'MKSTREAM')
    for (const item of [delivery('old-1'), delivery('old-2')]) await client.xadd('webhooks:{webhooks}:stream', '*', 'd', JSON.stringify(item))
    t.same(await queue.migrate('new-instance', 60_000), new Map([['acme', 2]]))
    t.same((await queue.deadLetters('acme', 10)).map((letter) => [letter.delivery.messageId, letter.reason]), [['acme-1', 'overflow'], ['acme-0', 'overflow']])
    t.equal((await queue.backlog('acme')).depth, 3)
  })
})
