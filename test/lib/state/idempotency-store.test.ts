import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import type { IdempotencyStore, StoredResponse } from '../../../lib/state/idempotency.js'
import { MemoryIdempotencyStore } from '../../../lib/state/memory/idempotency-store.js'
import { RedisIdempotencyStore } from '../../../lib/state/redis/idempotency-store.js'
import { StoreUnavailableError, withStoreBudget } from '../../../lib/store-errors.js'
import { redisTestOptions, redisWithClients } from '../../support/redis.js'
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

let attempts = 0
/** An attempt's own id, as the plugin makes one per request. */
function freshAttempt (): string {
  return `attempt-${++attempts}`
}

/** The behaviour every IdempotencyStore must have. */
function idempotencyStoreSuite (t: Test, store: () => IdempotencyStore): void {
  t.test('claim, in flight, complete, replay', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    t.strictSame(await idem.begin(scope, key, 'fp-a', first, TTL, LOCK), { state: 'started' })
    t.strictSame(await idem.begin(scope, key, 'fp-a', freshAttempt(), TTL, LOCK), { state: 'in_flight' }, 'retry while in flight')
    t.strictSame(await idem.begin(scope, key, 'fp-b', freshAttempt(), TTL, LOCK), { state: 'mismatch' }, 'other request while in flight')

    t.equal(await idem.sending(scope, key, first), true, 'the owner may send')
    await idem.complete(scope, key, 'fp-a', first, accepted, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp-a', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted })
    t.strictSame(await idem.begin(scope, key, 'fp-a', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted }, 'replays again')
    t.strictSame(await idem.begin(scope, key, 'fp-b', freshAttempt(), TTL, LOCK), { state: 'mismatch' }, 'other request after completion')
  })

  t.test('the stored response is a copy', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    const headers: Record<string, string> = { 'content-type': 'text/plain' }
    await idem.begin(scope, key, 'fp', first, TTL, LOCK)
    await idem.complete(scope, key, 'fp', first, { statusCode: 200, body: 'ok', headers }, TTL)
    headers['content-type'] = 'changed'
    const replay = await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK)
    t.strictSame(replay, { state: 'replay', response: { statusCode: 200, body: 'ok', headers: { 'content-type': 'text/plain' } } })
  })

  t.test('of 20 concurrent begins exactly one starts', async (t) => {
    const idem = store()
    const key = freshKey()
    const results = await Promise.all(Array.from({ length: 20 }, async () => await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK)))
    t.equal(results.filter((result) => result.state === 'started').length, 1, 'started')
    t.equal(results.filter((result) => result.state === 'in_flight').length, 19, 'in_flight')
  })

  t.test('abandon frees the key for any request, also after its attempt marked sending', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    await idem.begin(scope, key, 'fp-a', first, TTL, LOCK)
    t.equal(await idem.sending(scope, key, first), true)
    await idem.abandon(scope, key, first)
    const second = freshAttempt()
    t.strictSame(await idem.begin(scope, key, 'fp-b', second, TTL, LOCK), { state: 'started' })
    t.strictSame(await idem.begin(scope, key, 'fp-b', freshAttempt(), TTL, LOCK), { state: 'in_flight' }, 'the new claim holds')
  })

  t.test('an attempt acts on its own claim only: another\'s abandon, mark or answer changes nothing', async (t) => {
    const idem = store()
    const key = freshKey()
    const owner = freshAttempt()
    const stranger = freshAttempt()
    await idem.begin(scope, key, 'fp', owner, TTL, LOCK)
    await idem.abandon(scope, key, stranger)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'in_flight' }, 'not released')
    t.equal(await idem.sending(scope, key, stranger), false, 'no mark for another attempt')
    await idem.complete(scope, key, 'fp', stranger, { statusCode: 500, body: 'not mine', headers: {} }, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'in_flight' }, 'not answered')
    await idem.complete(scope, key, 'fp', owner, accepted, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted }, 'the owner\'s answer')
  })

  t.test('abandon never removes a completed response', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    await idem.begin(scope, key, 'fp', first, TTL, LOCK)
    await idem.complete(scope, key, 'fp', first, accepted, TTL)
    await idem.abandon(scope, key, first)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted })
  })

  t.test('the first completion wins', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    await idem.begin(scope, key, 'fp', first, TTL, LOCK)
    await idem.complete(scope, key, 'fp', first, accepted, TTL)
    await idem.complete(scope, key, 'fp', first, { statusCode: 500, body: 'late', headers: {} }, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted })
  })

  // Claims and records that lapse are waited for, not slept through: each attempt until the
  // lapse must see the state before it, and none may see the lapse before its time. A claim
  // taken over is held for LOCK, long enough to be seen held.
  t.test('a claim that lapsed before its attempt could send lets a retry of the same request take over', async (t) => {
    const idem = store()
    const key = freshKey()
    const claimed = Date.now()
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, SHORT), { state: 'started' })
    t.strictSame(await idem.begin(scope, key, 'other', freshAttempt(), TTL, LOCK), { state: 'mismatch' }, 'bound to its request')
    const retries = await attemptUntil('the claim to lapse', async () => await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), (answer) => answer.state === 'started')
    t.ok(Date.now() - claimed >= SHORT, 'not before the claim lapsed')
    t.strictSame(retries.slice(0, -1).filter((answer) => answer.state !== 'in_flight'), [], 'until then every retry found it in flight')
    t.strictSame(await idem.begin(scope, key, 'other', freshAttempt(), TTL, LOCK), { state: 'mismatch' }, 'still bound to its request')
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'in_flight' }, 'and claimed anew')
  })

  t.test('a claim whose attempt may have sent is never taken over: its outcome is unknown until its answer lands', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    const claimed = Date.now()
    await idem.begin(scope, key, 'fp', first, TTL, SHORT)
    t.equal(await idem.sending(scope, key, first), true)
    const retries = await attemptUntil('the claim to lapse', async () => await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), (answer) => answer.state !== 'in_flight')
    t.ok(Date.now() - claimed >= SHORT, 'not before the claim lapsed')
    t.strictSame(retries.at(-1), { state: 'unknown' }, 'then the outcome is unknown, and nobody runs the key')
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'unknown' }, 'and stays so')
    t.strictSame(await idem.begin(scope, key, 'other', freshAttempt(), TTL, LOCK), { state: 'mismatch' }, 'still bound to its request')
    await idem.complete(scope, key, 'fp', first, accepted, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted }, 'an answer recorded late is replayed')
  })

  t.test('an unknown outcome lasts until the ttl of the claim, no longer', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    const claimed = Date.now()
    await idem.begin(scope, key, 'fp', first, SHORT * 2, SHORT)
    await idem.sending(scope, key, first)
    const retries = await attemptUntil('the record to expire', async () => await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), (answer) => answer.state === 'started')
    t.ok(Date.now() - claimed >= SHORT * 2, 'not before its ttl')
    t.strictSame(retries.slice(0, -1).filter((answer) => answer.state !== 'in_flight' && answer.state !== 'unknown'), [], 'until then no retry ran it')
  })

  t.test('an attempt whose claim was taken over may not send, and its late answer is not recorded', async (t) => {
    const idem = store()
    const key = freshKey()
    const slow = freshAttempt()
    await idem.begin(scope, key, 'fp', slow, TTL, SHORT)
    let retry = ''
    await attemptUntil('the claim to lapse', async () => {
      retry = freshAttempt()
      return await idem.begin(scope, key, 'fp', retry, TTL, LOCK)
    }, (answer) => answer.state === 'started')
    t.equal(await idem.sending(scope, key, slow), false, 'the slow attempt must not send')
    await idem.complete(scope, key, 'fp', slow, { statusCode: 200, body: 'stale', headers: {} }, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'in_flight' }, 'the retry still holds the key')
    t.equal(await idem.sending(scope, key, retry), true)
    await idem.complete(scope, key, 'fp', retry, accepted, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted })
  })

  t.test('after the ttl the key is forgotten', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    await idem.begin(scope, key, 'fp-a', first, TTL, LOCK)
    const completed = Date.now()
    await idem.complete(scope, key, 'fp-a', first, accepted, SHORT)
    const others = await attemptUntil('the record to expire', async () => await idem.begin(scope, key, 'fp-b', freshAttempt(), TTL, LOCK), (answer) => answer.state === 'started')
    t.ok(Date.now() - completed >= SHORT, 'not before its ttl')
    t.strictSame(others.slice(0, -1).filter((answer) => answer.state !== 'mismatch'), [], 'until then the key was bound to the first request')
    t.strictSame(await idem.begin(scope, key, 'fp-a', freshAttempt(), TTL, LOCK), { state: 'mismatch' }, 'and now to the one that reused it')
  })

  t.test('a lapsed owner cannot overwrite a key another request now holds', async (t) => {
    const idem = store()
    const key = freshKey()
    const first = freshAttempt()
    await idem.begin(scope, key, 'fp-a', first, SHORT, SHORT)
    let second = ''
    const others = await attemptUntil('the first claim to lapse', async () => {
      second = freshAttempt()
      return await idem.begin(scope, key, 'fp-b', second, TTL, LOCK)
    }, (answer) => answer.state === 'started')
    t.strictSame(others.slice(0, -1).filter((answer) => answer.state !== 'mismatch'), [], 'until then the key was fp-a\'s')
    await idem.complete(scope, key, 'fp-a', first, { statusCode: 500, body: 'stale', headers: {} }, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp-b', freshAttempt(), TTL, LOCK), { state: 'in_flight' }, 'fp-b still in flight')
    await idem.complete(scope, key, 'fp-b', second, accepted, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp-b', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted })
  })

  t.test('scopes do not share keys', async (t) => {
    const idem = store()
    const key = freshKey()
    await idem.begin('acme:live', key, 'fp-a', freshAttempt(), TTL, LOCK)
    t.strictSame(await idem.begin('acme:test', key, 'fp-b', freshAttempt(), TTL, LOCK), { state: 'started' })
    t.strictSame(await idem.begin('globex:live', key, 'fp-a', freshAttempt(), TTL, LOCK), { state: 'started' })
  })

  t.test('invalid arguments are rejected', async (t) => {
    const idem = store()
    await t.rejects(idem.begin(scope, freshKey(), 'fp', freshAttempt(), 1000, 2000), RangeError, 'lock longer than ttl')
    await t.rejects(idem.begin(scope, freshKey(), 'fp', freshAttempt(), 0, 0), RangeError)
    await t.rejects(idem.begin('', freshKey(), 'fp', freshAttempt(), TTL, LOCK), RangeError)
    await t.rejects(idem.sending('', freshKey(), freshAttempt()), RangeError)
    await t.rejects(idem.complete(scope, freshKey(), 'fp', freshAttempt(), accepted, -1), RangeError)
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
    for (let i = 0; i < 50; i++) await store.begin(scope, freshKey(), 'fp', freshAttempt(), 150, 150)
    await store.begin(scope, 'long-lived', 'fp', freshAttempt(), TTL, LOCK)
    t.equal(store.size, 51)
    // size does not look entries up, so only the sweep can bring it down.
    await until('the sweep', () => store.size === 1)
    t.equal(store.size, 1, 'only the live entry is left')
  })
})

t.test('RedisIdempotencyStore', redisTestOptions(), async (t) => {
  const { server, client, other } = await redisWithClients(t)
  /** A client whose fenced scripts may start up to `commandTimeout` less the margin after they are sent. */
  const connect = async (commandTimeout: number): Promise<Redis> => {
    const connection = new Redis(server.url, { maxRetriesPerRequest: 1, enableOfflineQueue: false, commandTimeout })
    connection.on('error', () => {})
    t.teardown(() => { connection.disconnect() })
    await until('the client to connect', () => connection.status === 'ready')
    return connection
  }

  idempotencyStoreSuite(t, () => new RedisIdempotencyStore(client))

  t.test('both keys carry the scope as hash tag and expire', async (t) => {
    const idem = new RedisIdempotencyStore(client)
    const key = freshKey()
    const first = freshAttempt()
    await idem.begin('acme:live', key, 'fp', first, TTL, LOCK)
    const stored = (await client.keys(`idem:{acme:live}:?:${key}`)).sort()
    t.strictSame(stored, [`idem:{acme:live}:l:${key}`, `idem:{acme:live}:r:${key}`])
    for (const name of stored) {
      const ttl = await client.pttl(name)
      t.ok(ttl > 0 && ttl <= (name.includes(':l:') ? LOCK : TTL), `${name} expires in ${ttl} ms`)
    }
    await idem.complete('acme:live', key, 'fp', first, accepted, TTL)
    t.strictSame(await client.keys(`idem:{acme:live}:?:${key}`), [`idem:{acme:live}:r:${key}`], 'completion releases the lock')
  })

  t.test('two instances on one server: exactly one claim', async (t) => {
    const first = new RedisIdempotencyStore(client)
    const second = new RedisIdempotencyStore(other)
    const key = freshKey()
    const results = await Promise.all(Array.from({ length: 20 }, async (_, i) => {
      const attempt = freshAttempt()
      return { attempt, claim: await (i % 2 === 0 ? first : second).begin(scope, key, 'fp', attempt, TTL, LOCK) }
    }))
    const started = results.filter(({ claim }) => claim.state === 'started')
    t.equal(started.length, 1)
    await first.complete(scope, key, 'fp', started[0]?.attempt ?? '', accepted, TTL)
    t.strictSame(await second.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted })
  })

  t.test('a record of an earlier version (no attempt) is taken over once its claim lapses, as it was', async (t) => {
    const idem = new RedisIdempotencyStore(client)
    const key = freshKey()
    await client.hset(`idem:{${scope}}:r:${key}`, 'fingerprint', 'fp')
    await client.pexpire(`idem:{${scope}}:r:${key}`, TTL)
    t.strictSame(await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'started' })
  })

  t.test('an answer the caller gave up on while Redis was frozen is recorded when Redis runs it, however late', async (t) => {
    const hasty = await connect(100)
    const idem = new RedisIdempotencyStore(hasty)
    const key = freshKey()
    const first = freshAttempt()
    await idem.begin(scope, key, 'fp', first, TTL, LOCK)
    t.equal(await idem.sending(scope, key, first), true)
    server.freeze()
    let thawed = false
    t.teardown(() => { if (!thawed) server.thaw() })
    await t.rejects(withStoreBudget(100, async () => await idem.complete(scope, key, 'fp', first, accepted, TTL)), StoreUnavailableError, 'the caller gave up on it')
    // Later than the deadline any fenced script sent with it would have had.
    server.thaw()
    thawed = true
    await hasty.ping()
    t.strictSame(await new RedisIdempotencyStore(other).begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'replay', response: accepted }, 'a retry gets the answer that was given')
  })

  t.test('a begin the caller gave up on leaves no claim behind, also when Redis ran it', async (t) => {
    const slow = await connect(10_000)
    const idem = new RedisIdempotencyStore(slow)
    const key = freshKey()
    // The clock's offset measured first, as a running service has it: the begin goes out at once.
    await idem.begin(scope, freshKey(), 'fp', freshAttempt(), TTL, LOCK)
    server.freeze()
    let thawed = false
    t.teardown(() => { if (!thawed) server.thaw() })
    await t.rejects(withStoreBudget(100, async () => await idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK)), StoreUnavailableError, 'the caller gave up on it')
    // Long before its deadline: Redis runs the begin, then what was sent after it.
    server.thaw()
    thawed = true
    await slow.ping()
    t.strictSame(await new RedisIdempotencyStore(other).begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), { state: 'started' }, 'a retry runs')
  })

  t.test('a corrupted stored response is an error, not a replay', async (t) => {
    const idem = new RedisIdempotencyStore(client)
    const key = freshKey()
    await client.hset(`idem:{${scope}}:r:${key}`, 'fingerprint', 'fp', 'response', '{"statusCode":"200"}')
    await t.rejects(idem.begin(scope, key, 'fp', freshAttempt(), TTL, LOCK), /malformed/)
  })

  t.test('with Redis down, operations reject promptly instead of hanging', async (t) => {
    const idem = new RedisIdempotencyStore(client)
    await server.stop()
    const started = performance.now()
    await t.rejects(idem.begin(scope, freshKey(), 'fp', freshAttempt(), TTL, LOCK))
    await t.rejects(idem.sending(scope, freshKey(), freshAttempt()))
    await t.rejects(idem.complete(scope, freshKey(), 'fp', freshAttempt(), accepted, TTL))
    await t.rejects(idem.abandon(scope, freshKey(), freshAttempt()))
    const elapsed = performance.now() - started
    // What this catches is a wait that ends only when Redis returns (it does not here): 10 s is far above any machine's speed.
    t.ok(elapsed < 10_000, `rejected in ${Math.round(elapsed)} ms`)
  })
})
