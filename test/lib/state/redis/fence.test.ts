import t from 'tap'
import { Redis } from 'ioredis'
import { fenceMarginMs } from '../../../../lib/state/redis/client.js'
import { FENCE_LUA, RedisClock, UNDO_SHEBANG, WRITES_SHEBANG } from '../../../../lib/state/redis/fence.js'
import { storeCall, storeUndo, StoreUnavailableError, withStoreBudget } from '../../../../lib/store-errors.js'
import { redisTestOptions, startRedis } from '../../../support/redis.js'

const FENCED_SET = `${WRITES_SHEBANG}${FENCE_LUA}
redis.call('SET', KEYS[1], ARGV[1])
return 1
`

t.test('a fenced script runs before its deadline and does nothing after it', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = new Redis(redis.url, { commandTimeout: 500 })
  t.teardown(() => { client.disconnect() })
  const clock = new RedisClock(client, 500)
  const before = Date.now()
  const deadline = Number(await clock.deadline())
  // Same machine, same clock: the deadline is the timeout less the margin from now, give or take the measurement.
  t.ok(deadline <= Date.now() + 500 - fenceMarginMs(500), 'never later than the timeout less the margin')
  t.ok(deadline >= before + 500 - fenceMarginMs(500) - 50, 'not much earlier either')

  t.equal(await client.eval(FENCED_SET, 1, 'in-time', 'yes', String(deadline)), 1)
  t.equal(await client.get('in-time'), 'yes')
  await t.rejects(client.eval(FENCED_SET, 1, 'late', 'yes', String(Date.now() - 1)), /^FENCED/)
  t.equal(await client.exists('late'), 0, 'a script past its deadline wrote nothing')
})

/** Frees first, then writes: without its shebang Redis would run the first half and refuse the second. */
const FENCED_MOVE = `${WRITES_SHEBANG}${FENCE_LUA}
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
`

const UNDO = `${UNDO_SHEBANG}
return redis.call('DECR', KEYS[1])
`

t.test('at the memory limit a fenced script is refused whole, an undo runs', redisTestOptions(), async (t) => {
  const redis = await startRedis(['--maxmemory', '1mb', '--maxmemory-policy', 'noeviction'])
  t.teardown(async () => { await redis.stop() })
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  const clock = new RedisClock(client, 500)
  await client.set('counter', '5')
  await client.set('old', 'kept')
  // Fill Redis past its limit; each SET is refused once it is over.
  const filler = 'x'.repeat(64 * 1024)
  for (let i = 0; i < 64; i++) await client.set(`fill:${i}`, filler).catch(() => null)
  await t.rejects(client.eval(FENCED_MOVE, 2, 'new', 'old', 'yes', await clock.deadline()), /^OOM/)
  t.equal(await client.exists('new'), 0)
  t.equal(await client.get('old'), 'kept', 'not even the part that frees memory ran')
  t.equal(await client.eval(UNDO, 1, 'counter'), 4, 'an undo is never refused for lack of memory')
})

t.test('one request, one timeout: once a store call timed out, later ones fail at once', async (t) => {
  await withStoreBudget(null, async () => {
    await t.rejects(storeCall('first', async () => { throw new Error('Command timed out') }), StoreUnavailableError)
    let tried = false
    await t.rejects(storeCall('second', async () => { tried = true }), StoreUnavailableError)
    t.equal(tried, false, 'the second call was not sent')
    let undone = false
    await t.rejects(storeUndo('refund', async () => { undone = true }), StoreUnavailableError)
    t.equal(undone, true, 'an undo is still sent, only not waited for')
  })
  await withStoreBudget(null, async () => {
    await t.rejects(storeCall('refused', async () => { throw new Error('OOM command not allowed') }), StoreUnavailableError)
    t.equal(await storeCall('next', async () => 'sent'), 'sent', 'an error reply is not a stall: the next call is sent')
  })
  await withStoreBudget(null, async () => {
    t.equal(await storeCall('other request', async () => 'sent'), 'sent', 'each request has its own budget')
  })
  await withStoreBudget(20, async () => {
    await t.rejects(storeCall('unanswered', async () => await new Promise(() => {})), { cause: { message: 'Command timed out' } }, 'a call waits the request\'s timeout, no longer')
    let tried = false
    await t.rejects(storeCall('after', async () => { tried = true }), StoreUnavailableError)
    t.equal(tried, false, 'and the request is then known stalled')
  })
})
