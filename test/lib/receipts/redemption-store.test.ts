import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { MemoryRedemptionStore } from '../../../lib/receipts/memory-redemption-store.js'
import type { RedemptionStore } from '../../../lib/receipts/redemption-store.js'
import { RedisRedemptionStore } from '../../../lib/receipts/redis-redemption-store.js'
import { StoreFullError, StoreUnavailableError } from '../../../lib/store-errors.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../support/redis.js'

let receipts = 0
function freshJti (): string {
  return `jti-${++receipts}-${process.pid}`
}

/** What every redemption store does alike. */
function redemptionSuite (t: Test, makeStore: () => RedemptionStore): void {
  t.test('a receipt redeems once', async (t) => {
    const store = makeStore()
    const jti = freshJti()
    t.equal(await store.redeem('acme:live', jti, 60_000), true, 'first')
    t.equal(await store.redeem('acme:live', jti, 60_000), false, 'second')
    t.equal(await store.redeem('acme:test', jti, 60_000), true, 'another scope is another receipt')
  })

  t.test('of 20 concurrent redemptions exactly one is first', async (t) => {
    const store = makeStore()
    const jti = freshJti()
    const results = await Promise.all(Array.from({ length: 20 }, async () => await store.redeem('acme:live', jti, 60_000)))
    t.equal(results.filter(Boolean).length, 1)
  })

  t.test('the mark lasts as long as asked, then goes', async (t) => {
    const store = makeStore()
    const jti = freshJti()
    t.equal(await store.redeem('acme:live', jti, 150), true)
    t.equal(await store.redeem('acme:live', jti, 150), false)
    await sleep(400)
    t.equal(await store.redeem('acme:live', jti, 150), true, 'expired marks are forgotten (the receipt has expired by then)')
  })

  t.test('misuse is refused the same way', async (t) => {
    const store = makeStore()
    await t.rejects(store.redeem('', 'x', 1000), RangeError)
    await t.rejects(store.redeem('acme:live', '', 1000), RangeError)
    await t.rejects(store.redeem('acme:live', 'x', 0), RangeError)
    await t.rejects(store.redeem('acme:live', 'x', 1.5), RangeError)
  })
}

t.test('memory', async (t) => {
  redemptionSuite(t, () => {
    const store = new MemoryRedemptionStore()
    t.teardown(async () => { await store.close() })
    return store
  })

  t.test('is bounded: past its cap, a redemption fails rather than grow', async (t) => {
    let now = 1_000_000
    const store = new MemoryRedemptionStore({ maxEntries: 2, now: () => now })
    t.teardown(async () => { await store.close() })
    await store.redeem('acme:live', 'a', 1000)
    await store.redeem('acme:live', 'b', 5000)
    await t.rejects(store.redeem('acme:live', 'c', 1000), StoreFullError)
    now += 2000
    t.equal(await store.redeem('acme:live', 'c', 1000), true, 'expired entries make room')
    t.equal(store.size, 2)
  })
})

t.test('redis', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = await connectFailFast(redis.url)
  t.teardown(() => { client.disconnect() })
  redemptionSuite(t, () => new RedisRedemptionStore(client))

  t.test('keys carry the tenant scope as their hash tag, and expire', async (t) => {
    const store = new RedisRedemptionStore(client)
    await store.redeem('acme:live', 'tagged', 60_000)
    const ttl = await client.pttl('receipt:{acme:live}:tagged')
    t.ok(ttl > 0 && ttl <= 60_000, `ttl ${ttl}`)
  })

  t.test('Redis down: the redemption fails (503), never passes', async (t) => {
    const down = await startRedis()
    const downClient = await connectFailFast(down.url)
    t.teardown(() => { downClient.disconnect() })
    await down.stop()
    await t.rejects(new RedisRedemptionStore(downClient).redeem('acme:live', 'x', 1000), StoreUnavailableError)
  })
})
