import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { MemoryTokenStore } from '../../../lib/state/memory/token-store.js'
import { RedisTokenStore } from '../../../lib/state/redis/token-store.js'
import { tokenKey } from '../../../lib/state/keys.js'
import type { TokenStore } from '../../../lib/state/tokens.js'
import { StoreFullError, StoreUnavailableError } from '../../../lib/store-errors.js'
import { redisTestOptions, startRedis } from '../../support/redis.js'

/** The contract every token store keeps. */
function tokenStoreSuite (t: Test, makeStore: (t: Test) => Promise<TokenStore>): void {
  t.test('put, take once, gone', async (t) => {
    const store = await makeStore(t)
    t.equal(await store.put('a', 'record-a', 10_000), true)
    t.equal(await store.put('a', 'other', 10_000), false, 'NX: an existing token is never overwritten')
    t.equal(await store.take('a'), 'record-a')
    t.equal(await store.take('a'), null, 'single use')
    t.equal(await store.take('never'), null)
  })

  t.test('delete removes a token', async (t) => {
    const store = await makeStore(t)
    await store.put('b', 'record-b', 10_000)
    await store.delete('b')
    t.equal(await store.take('b'), null)
    await store.delete('b')
  })

  t.test('expiry is enforced', async (t) => {
    const store = await makeStore(t)
    await store.put('c', 'record-c', 150)
    await new Promise((resolve) => setTimeout(resolve, 300))
    t.equal(await store.take('c'), null)
    t.equal(await store.put('c', 'again', 10_000), true, 'an expired key can be used again')
  })

  t.test('of 50 concurrent takes exactly one gets the record', async (t) => {
    const store = await makeStore(t)
    await store.put('d', 'record-d', 10_000)
    const results = await Promise.all(Array.from({ length: 50 }, async () => await store.take('d')))
    t.equal(results.filter((result) => result === 'record-d').length, 1)
    t.equal(results.filter((result) => result === null).length, 49)
  })

  t.test('records are opaque strings', async (t) => {
    const store = await makeStore(t)
    const record = 'k1.abc|def|with|pipes'
    await store.put('e', record, 10_000)
    t.equal(await store.take('e'), record)
  })

  t.test('ready', async (t) => {
    const store = await makeStore(t)
    t.equal(await store.ready(), true)
  })
}

t.test('memory token store', async (t) => {
  tokenStoreSuite(t, async (t) => {
    const store = new MemoryTokenStore({ maxTokensPerScope: 1000 })
    t.teardown(async () => { await store.close() })
    return store
  })

  t.test('a cap bounds memory; expired tokens are swept before refusing', async (t) => {
    let now = 1_000_000
    const store = new MemoryTokenStore({ maxTokensPerScope: 3, now: () => now })
    t.teardown(async () => { await store.close() })
    await store.put('x1', 'r', 1000)
    await store.put('x2', 'r', 1000)
    await store.put('x3', 'r', 5000)
    await t.rejects(store.put('x4', 'r', 1000), StoreFullError)
    t.equal(await store.ready(), true, 'a full scope takes nobody out of rotation')
    now += 2000
    t.equal(await store.put('x4', 'r', 1000), true, 'two expired tokens made room')
    t.equal(store.size, 2)
  })

  t.test('each tenant scope has its own cap: one at its cap leaves every other storing codes', async (t) => {
    const store = new MemoryTokenStore({ maxTokensPerScope: 2 })
    t.teardown(async () => { await store.close() })
    await store.put(tokenKey('acme', 'live', 'a1'), 'r', 60_000)
    await store.put(tokenKey('acme', 'live', 'a2'), 'r', 60_000)
    await t.rejects(store.put(tokenKey('acme', 'live', 'a3'), 'r', 60_000), StoreFullError, 'acme is at its cap')
    t.equal(await store.put(tokenKey('acme', 'test', 't1'), 'r', 60_000), true, 'its sandbox is another scope')
    t.equal(await store.put(tokenKey('globex', 'live', 'g1'), 'r', 60_000), true, 'another tenant stores its codes')
    t.equal(await store.take(tokenKey('acme', 'live', 'a1')), 'r', 'acme\'s own codes are intact')
    t.equal(await store.put(tokenKey('acme', 'live', 'a3'), 'r', 60_000), true, 'a used code made room')
  })

  t.test('the sweep removes expired tokens from the oldest on', async (t) => {
    let now = 0
    const store = new MemoryTokenStore({ maxTokensPerScope: 100, now: () => now })
    t.teardown(async () => { await store.close() })
    for (let i = 0; i < 10; i++) await store.put(`s${i}`, 'r', 100)
    await store.put('long', 'r', 10_000)
    now = 500
    t.equal(store.sweep(1024), 10)
    t.equal(store.size, 1)
  })
})

t.test('redis token store', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  const connect = async (t: Test): Promise<Redis> => {
    const client = new Redis(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 500 })
    client.on('error', () => {})
    await new Promise((resolve) => client.once('ready', resolve))
    t.teardown(() => { client.disconnect() })
    return client
  }
  tokenStoreSuite(t, async (t) => {
    const client = await connect(t)
    await client.flushall()
    return new RedisTokenStore(client)
  })

  t.test('an unreachable Redis fails fast with StoreUnavailableError', async (t) => {
    const client = await connect(t)
    const store = new RedisTokenStore(client)
    await server.stop()
    t.teardown(async () => { await server.start() })
    const started = Date.now()
    await t.rejects(store.put('z', 'r', 1000), StoreUnavailableError)
    await t.rejects(store.take('z'), StoreUnavailableError)
    await t.rejects(store.delete('z'), StoreUnavailableError)
    t.equal(await store.ready(), false)
    t.ok(Date.now() - started < 3000, 'no hang')
  })
})
