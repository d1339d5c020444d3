import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import type { IdempotencyStore, StoredResponse } from '../../../lib/state/idempotency.js'
import { MemoryIdempotencyStore } from '../../../lib/state/memory/idempotency-store.js'
import { RedisIdempotencyStore } from '../../../lib/state/redis/idempotency-store.js'
import { redisTestOptions, startRedis, connectFailFast } from '../../support/redis.js'
import { attemptUntil, until } from '../../support/wait.js'

const TTL = 60_000
const LOCK = 30_000
/** A claim or record meant to lapse during the test. */
const SHORT = 300

const accepted: StoredResponse = {
  statusCode: 202,
  body: '{"id":"ver_123","status":"sent"}',
  headers: { 'content-type': 'application/json; charset=utf-8', 'x-ratelimit-remaining': '9' }
}

let keys = 0
/** A key no other test touches, so tests sharing one Redis cannot see each other's entries. */
function freshKey (): string {
  return `key-${++keys}-${process.pid}`
}

const scope = 'acme:live'

/** The behaviour every IdempotencyStore must have. */
function idempotencyStoreSuite (t: Test, store: () => IdempotencyStore): void {
  t.test('claim, in flight, complete, replay', async (t) => {
    const idem = store()
    const key = freshKey()
    t.strictSame(await idem.begin(scope, key, 'fp-a', TTL, LOCK), { state: 'started' })
    t.strictSame(await idem.begin(scope, key, 'fp-a', TTL, LOCK), { state: 'in_flight' }, 'retry while in flight')
    t.strictSame(await idem.begin(scope, key, 'fp-b', TTL, LOCK), { state: 'mismatch' }, 'other request while in flight')

    await idem.complete(scope, key, 'fp-a', accepted, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp-a', TTL, LOCK), { state: 'replay', response: accepted })
    t.strictSame(await idem.begin(scope, key, 'fp-a', TTL, LOCK), { state: 'replay', response: accepted }, 'replays again')
    t.strictSame(await idem.begin(scope, key, 'fp-b', TTL, LOCK), { state: 'mismatch' }, 'other request after completion')
  })

  t.test('the stored response is a copy', async (t) => {
    const idem = store()
    const key = freshKey()
    const headers: Record<string, string> = { 'content-type': 'text/plain' }
    await idem.begin(scope, key, 'fp', TTL, LOCK)
    await idem.complete(scope, key, 'fp', { statusCode: 200, body: 'ok', headers }, TTL)
    headers['content-type'] = 'changed'
    const replay = await idem.begin(scope, key, 'fp', TTL, LOCK)
    t.strictSame(replay, { state: 'replay', response: { statusCode: 200, body: 'ok', headers: { 'content-type': 'text/plain' } } })
  })

  t.test('of 20 concurrent begins exactly one starts', async (t) => {
    const idem = store()
    const key = freshKey()
    const results = await Promise.all(Array.from({ length: 20 }, async () => await idem.begin(scope, key, 'fp', TTL, LOCK)))
    t.equal(results.filter((result) => result.state === 'started').length, 1, 'started')
    t.equal(results.filter((result) => result.state === 'in_flight').length, 19, 'in_flight')
  })

  t.test('abandon frees the key for any request', async (t) => {
    const idem = store()
    const key = freshKey()
    await idem.begin(scope, key, 'fp-a', TTL, LOCK)
    await idem.abandon(scope, key)
    t.strictSame(await idem.begin(scope, key, 'fp-b', TTL, LOCK), { state: 'started' })
    t.strictSame(await idem.begin(scope, key, 'fp-b', TTL, LOCK), { state: 'in_flight' }, 'the new claim holds')
  })

  t.test('abandon never removes a completed response', async (t) => {
    const idem = store()
    const key = freshKey()
    await idem.begin(scope, key, 'fp', TTL, LOCK)
    await idem.complete(scope, key, 'fp', accepted, TTL)
    await idem.abandon(scope, key)
    t.strictSame(await idem.begin(scope, key, 'fp', TTL, LOCK), { state: 'replay', response: accepted })
  })

  t.test('the first completion wins', async (t) => {
    const idem = store()
    const key = freshKey()
    await idem.begin(scope, key, 'fp', TTL, LOCK)
    await idem.complete(scope, key, 'fp', accepted, TTL)
    await idem.complete(scope, key, 'fp', { statusCode: 500, body: 'late', headers: {} }, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp', TTL, LOCK), { state: 'replay', response: accepted })
  })

  // Claims and records that lapse are waited for, not slept through: each attempt until the
  // lapse must see the state before it, and none may see the lapse before its time. A claim
  // taken over is held for LOCK, long enough to be seen held.
  t.test('a lapsed claim lets a retry of the same request take over', async (t) => {
    const idem = store()
    const key = freshKey()
    const claimed = Date.now()
    t.strictSame(await idem.begin(scope, key, 'fp', TTL, SHORT), { state: 'started' })
    t.strictSame(await idem.begin(scope, key, 'other', TTL, LOCK), { state: 'mismatch' }, 'bound to its request')
    const retries = await attemptUntil('the claim to lapse', async () => await idem.begin(scope, key, 'fp', TTL, LOCK), (answer) => answer.state === 'started')
    t.ok(Date.now() - claimed >= SHORT, 'not before the claim lapsed')
    t.strictSame(retries.slice(0, -1).filter((answer) => answer.state !== 'in_flight'), [], 'until then every retry found it in flight')
    t.strictSame(await idem.begin(scope, key, 'other', TTL, LOCK), { state: 'mismatch' }, 'still bound to its request')
    t.strictSame(await idem.begin(scope, key, 'fp', TTL, LOCK), { state: 'in_flight' }, 'and claimed anew')
  })

  t.test('after the ttl the key is forgotten', async (t) => {
    const idem = store()
    const key = freshKey()
    await idem.begin(scope, key, 'fp-a', TTL, LOCK)
    const completed = Date.now()
    await idem.complete(scope, key, 'fp-a', accepted, SHORT)
    const others = await attemptUntil('the record to expire', async () => await idem.begin(scope, key, 'fp-b', TTL, LOCK), (answer) => answer.state === 'started')
    t.ok(Date.now() - completed >= SHORT, 'not before its ttl')
    t.strictSame(others.slice(0, -1).filter((answer) => answer.state !== 'mismatch'), [], 'until then the key was bound to the first request')
    t.strictSame(await idem.begin(scope, key, 'fp-a', TTL, LOCK), { state: 'mismatch' }, 'and now to the one that reused it')
  })

  t.test('a lapsed owner cannot overwrite a key another request now holds', async (t) => {
    const idem = store()
    const key = freshKey()
    await idem.begin(scope, key, 'fp-a', SHORT, SHORT)
    const others = await attemptUntil('the first claim to lapse', async () => await idem.begin(scope, key, 'fp-b', TTL, LOCK), (answer) => answer.state === 'started')
    t.strictSame(others.slice(0, -1).filter((answer) => answer.state !== 'mismatch'), [], 'until then the key was fp-a\'s')
    await idem.complete(scope, key, 'fp-a', { statusCode: 500, body: 'stale', headers: {} }, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp-b', TTL, LOCK), { state: 'in_flight' }, 'fp-b still in flight')
    await idem.complete(scope, key, 'fp-b', accepted, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp-b', TTL, LOCK), { state: 'replay', response: accepted })
  })

  t.test('scopes do not share keys', async (t) => {
    const idem = store()
    const key = freshKey()
    await idem.begin('acme:live', key, 'fp-a', TTL, LOCK)
    t.strictSame(await idem.begin('acme:test', key, 'fp-b', TTL, LOCK), { state: 'started' })
    t.strictSame(await idem.begin('globex:live', key, 'fp-a', TTL, LOCK), { state: 'started' })
  })

  t.test('invalid arguments are rejected', async (t) => {
    const idem = store()
    await t.rejects(idem.begin(scope, freshKey(), 'fp', 1000, 2000), RangeError, 'lock longer than ttl')
    await t.rejects(idem.begin(scope, freshKey(), 'fp', 0, 0), RangeError)
    await t.rejects(idem.begin('', freshKey(), 'fp', TTL, LOCK), RangeError)
    await t.rejects(idem.complete(scope, freshKey(), 'fp', accepted, -1), RangeError)
  })
}

t.test('MemoryIdempotencyStore', async (t) => {
  const stores: MemoryIdempotencyStore[] = []
  t.teardown(() => { for (const store of stores) store.close() })
  idempotencyStoreSuite(t, () => {
    const store = new MemoryIdempotencyStore()
    stores.push(store)
    return store
  })

  t.test('the sweep drops expired entries nobody asks about again', async (t) => {
    const store = new MemoryIdempotencyStore({ sweepIntervalMs: 20 })
    stores.push(store)
    for (let i = 0; i < 50; i++) await store.begin(scope, freshKey(), 'fp', 150, 150)
    await store.begin(scope, 'long-lived', 'fp', TTL, LOCK)
    t.equal(store.size, 51)
    // size does not look entries up, so only the sweep can bring it down.
    await until('the sweep', () => store.size === 1)
    t.equal(store.size, 1, 'only the live entry is left')
  })
})

t.test('RedisIdempotencyStore', redisTestOptions(), async (t) => {
  const server = await startRedis()
  const clients: Redis[] = []
  t.teardown(async () => {
    for (const client of clients) client.disconnect()
    await server.stop()
  })
  const client = await connectFailFast(server.url)
  const other = await connectFailFast(server.url)
  clients.push(client, other)

  idempotencyStoreSuite(t, () => new RedisIdempotencyStore(client))

  t.test('both keys carry the scope as hash tag and expire', async (t) => {
    const idem = new RedisIdempotencyStore(client)
    const key = freshKey()
    await idem.begin('acme:live', key, 'fp', TTL, LOCK)
    const stored = (await client.keys(`idem:{acme:live}:?:${key}`)).sort()
    t.strictSame(stored, [`idem:{acme:live}:l:${key}`, `idem:{acme:live}:r:${key}`])
    for (const name of stored) {
      const ttl = await client.pttl(name)
      t.ok(ttl > 0 && ttl <= (name.includes(':l:') ? LOCK : TTL), `${name} expires in ${ttl} ms`)
    }
    await idem.complete('acme:live', key, 'fp', accepted, TTL)
    t.strictSame(await client.keys(`idem:{acme:live}:?:${key}`), [`idem:{acme:live}:r:${key}`], 'completion releases the lock')
  })

  t.test('two instances on one server: exactly one claim', async (t) => {
    const first = new RedisIdempotencyStore(client)
    const second = new RedisIdempotencyStore(other)
    const key = freshKey()
    const results = await Promise.all(Array.from({ length: 20 }, async (_, i) =>
      await (i % 2 === 0 ? first : second).begin(scope, key, 'fp', TTL, LOCK)))
    t.equal(results.filter((result) => result.state === 'started').length, 1)
    await first.complete(scope, key, 'fp', accepted, TTL)
    t.strictSame(await second.begin(scope, key, 'fp', TTL, LOCK), { state: 'replay', response: accepted })
  })

  t.test('a corrupted stored response is an error, not a replay', async (t) => {
    const idem = new RedisIdempotencyStore(client)
    const key = freshKey()
    await client.hset(`idem:{${scope}}:r:${key}`, 'fingerprint', 'fp', 'response', '{"statusCode":"200"}')
    await t.rejects(idem.begin(scope, key, 'fp', TTL, LOCK), /malformed/)
  })

  t.test('with Redis down, operations reject promptly instead of hanging', async (t) => {
    const idem = new RedisIdempotencyStore(client)
    await server.stop()
    const started = performance.now()
    await t.rejects(idem.begin(scope, freshKey(), 'fp', TTL, LOCK))
    await t.rejects(idem.complete(scope, freshKey(), 'fp', accepted, TTL))
    await t.rejects(idem.abandon(scope, freshKey()))
    const elapsed = performance.now() - started
    t.ok(elapsed < 2000, `rejected in ${Math.round(elapsed)} ms`)
  })
})
