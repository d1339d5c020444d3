import t, { type Test } from 'tap'
import { MemoryRedemptionStore } from '../../../lib/state/memory/redemption-store.js'
import type { RedemptionStore } from '../../../lib/state/redemptions.js'
import { RedisRedemptionStore } from '../../../lib/state/redis/redemption-store.js'
import { StoreFullError, StoreUnavailableError } from '../../../lib/store-errors.js'
import { connectFailFast, redisTestOptions, redisWithClients, startRedis } from '../../support/redis.js'
import { attemptUntil } from '../../support/wait.js'

/** A mark meant to expire during the test. */
const SHORT = 300

let receipts = 0
function freshJti (): string {
  return `jti-${++receipts}-${process.pid}`
}

/** What every redemption store does alike. */
function redemptionSuite (t: Test, makeStore: () => RedemptionStore): void {
  t.test('a receipt redeems once in its epoch', async (t) => {
    const store = makeStore()
    const jti = freshJti()
    const epoch = await store.epoch('acme:live')
    t.match(epoch, /^[\w-]{22}$/)
    t.equal(await store.epoch('acme:live'), epoch, 'the same until the store may have lost redemptions')
    t.equal(await store.redeem('acme:live', jti, epoch, 60_000), 'redeemed', 'first')
    t.equal(await store.redeem('acme:live', jti, epoch, 60_000), 'already_redeemed', 'second')
    t.equal(await store.redeem('acme:test', jti, await store.epoch('acme:test'), 60_000), 'redeemed', 'another scope is another receipt')
  })

  t.test('a receipt of another epoch, or of none, never redeems, and is not marked', async (t) => {
    const store = makeStore()
    const jti = freshJti()
    t.equal(await store.redeem('acme:live', jti, 'an-epoch-that-is-gone', 60_000), 'other_epoch')
    t.equal(await store.redeem('acme:live', jti, undefined, 60_000), 'other_epoch', 'a receipt from before epochs')
    t.equal(await store.redeem('acme:live', jti, await store.epoch('acme:live'), 60_000), 'redeemed', 'the refusals marked nothing')
  })

  t.test('of 20 concurrent redemptions exactly one is first', async (t) => {
    const store = makeStore()
    const jti = freshJti()
    const epoch = await store.epoch('acme:live')
    const results = await Promise.all(Array.from({ length: 20 }, async () => await store.redeem('acme:live', jti, epoch, 60_000)))
    t.equal(results.filter((result) => result === 'redeemed').length, 1)
    t.equal(results.filter((result) => result === 'already_redeemed').length, 19)
  })

  t.test('the mark lasts as long as asked, then goes', async (t) => {
    const store = makeStore()
    const jti = freshJti()
    const epoch = await store.epoch('acme:live')
    const marked = Date.now()
    t.equal(await store.redeem('acme:live', jti, epoch, SHORT), 'redeemed')
    // Waited for, not slept through: every attempt until the mark goes finds it, and none
    // finds it gone before its time.
    const attempts = await attemptUntil('the mark to expire', async () => await store.redeem('acme:live', jti, epoch, 60_000), (answer) => answer === 'redeemed')
    t.ok(Date.now() - marked >= SHORT, 'not before the time asked')
    t.strictSame(attempts.slice(0, -1).filter((answer) => answer !== 'already_redeemed'), [], 'until then every attempt was already redeemed')
    t.equal(await store.redeem('acme:live', jti, epoch, 60_000), 'already_redeemed', 'expired marks are forgotten (the receipt has expired by then); the new one holds')
  })

  t.test('misuse is refused the same way', async (t) => {
    const store = makeStore()
    const epoch = await store.epoch('acme:live')
    await t.rejects(store.redeem('', 'x', epoch, 1000), RangeError)
    await t.rejects(store.redeem('acme:live', '', epoch, 1000), RangeError)
    await t.rejects(store.redeem('acme:live', 'x', epoch, 0), RangeError)
    await t.rejects(store.redeem('acme:live', 'x', epoch, 1.5), RangeError)
  })
}

t.test('memory', async (t) => {
  redemptionSuite(t, () => {
    const store = new MemoryRedemptionStore()
    t.teardown(async () => { await store.close() })
    return store
  })

  t.test('a new process has a new epoch: receipts issued before, redeemed or not, are refused', async (t) => {
    const before = new MemoryRedemptionStore()
    const after = new MemoryRedemptionStore()
    t.teardown(async () => { await before.close(); await after.close() })
    const epoch = await before.epoch()
    t.equal(await before.redeem('acme:live', 'redeemed-before', epoch, 60_000), 'redeemed')
    t.not(await after.epoch(), epoch)
    t.equal(await after.redeem('acme:live', 'redeemed-before', epoch, 60_000), 'other_epoch', 'redeemed before the restart: refused after it')
    t.equal(await after.redeem('acme:live', 'never-redeemed', epoch, 60_000), 'other_epoch', 'issued before, never redeemed: refused too, as nothing can tell')
  })

  t.test('on its injected clock the mark goes exactly when asked', async (t) => {
    let now = 1_000_000
    const store = new MemoryRedemptionStore({ now: () => now })
    t.teardown(async () => { await store.close() })
    const epoch = await store.epoch()
    t.equal(await store.redeem('acme:live', 'timed', epoch, 1000), 'redeemed')
    now += 999
    t.equal(await store.redeem('acme:live', 'timed', epoch, 1000), 'already_redeemed', 'the last millisecond')
    now += 1
    t.equal(await store.redeem('acme:live', 'timed', epoch, 1000), 'redeemed', 'gone at its end')
  })

  t.test('is bounded: past its cap, a redemption fails rather than grow', async (t) => {
    let now = 1_000_000
    const store = new MemoryRedemptionStore({ maxEntries: 2, now: () => now })
    t.teardown(async () => { await store.close() })
    const epoch = await store.epoch()
    await store.redeem('acme:live', 'a', epoch, 1000)
    await store.redeem('acme:live', 'b', epoch, 5000)
    await t.rejects(store.redeem('acme:live', 'c', epoch, 1000), StoreFullError)
    now += 2000
    t.equal(await store.redeem('acme:live', 'c', epoch, 1000), 'redeemed', 'expired entries make room')
    t.equal(store.size, 2)
  })
})

t.test('redis', redisTestOptions(), async (t) => {
  const { client } = await redisWithClients(t)
  redemptionSuite(t, () => new RedisRedemptionStore(client))

  t.test('keys carry the tenant scope as their hash tag; marks expire, the epoch does not', async (t) => {
    const store = new RedisRedemptionStore(client)
    await store.redeem('acme:live', 'tagged', await store.epoch('acme:live'), 60_000)
    const ttl = await client.pttl('receipt:{acme:live}:tagged')
    t.ok(ttl > 0 && ttl <= 60_000, `ttl ${ttl}`)
    t.equal(await client.pttl('receipt-epoch:{acme:live}'), -1)
  })

  t.test('every instance on one Redis shares the epoch', async (t) => {
    const epoch = await new RedisRedemptionStore(client).epoch('acme:live')
    t.equal(await new RedisRedemptionStore(client).redeem('acme:live', freshJti(), epoch, 60_000), 'redeemed', 'a receipt of one instance redeems on another, or after a restart of the service')
  })

  t.test('Redis losing its data makes a new epoch: no receipt of the old one redeems again', async (t) => {
    const store = new RedisRedemptionStore(client)
    const epoch = await store.epoch('acme:live')
    t.equal(await store.redeem('acme:live', 'before-flush', epoch, 60_000), 'redeemed')
    await client.flushall()
    t.equal(await store.redeem('acme:live', 'before-flush', epoch, 60_000), 'other_epoch', 'its redemption record is gone, and still it does not redeem again')
    t.equal(await store.redeem('acme:live', 'unredeemed', epoch, 60_000), 'other_epoch', 'nor does one never redeemed: nothing can tell')
    const next = await store.epoch('acme:live')
    t.not(next, epoch, 'the new epoch, read back where the refusal made it')
    t.equal(await new RedisRedemptionStore(client).epoch('acme:live'), next, 'and every instance reads the same')
    t.equal(await store.redeem('acme:live', 'after-flush', next, 60_000), 'redeemed')
  })

  t.test('Redis down: the redemption fails (503), never passes; receipts are still issued, bound to an epoch', async (t) => {
    const down = await startRedis()
    const downClient = await connectFailFast(down.url)
    t.teardown(() => { downClient.disconnect() })
    const store = new RedisRedemptionStore(downClient)
    const known = await store.epoch('acme:live')
    const fresh = new RedisRedemptionStore(downClient)
    await down.stop()
    await t.rejects(store.redeem('acme:live', 'x', known, 1000), StoreUnavailableError)
    t.equal(await store.epoch('acme:live'), known, 'the epoch last read')
    const unknown = await fresh.epoch('acme:live')
    t.not(unknown, known, 'never having read one: an epoch Redis does not hold, whose receipt will be refused')
  })
})
