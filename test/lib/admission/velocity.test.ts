import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { HIT_LIMIT_LUA, MemoryVelocityCounter, parseRateLimit, type WindowCount } from '../../../lib/admission/velocity.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../support/redis.js'

type Hit = (bucket: string, windowMs: number) => Promise<WindowCount>

/** The fixed-window contract both counters keep: the Lua function and its in-process twin. */
function velocitySuite (t: Test, makeHit: (t: Test) => Promise<Hit>): void {
  t.test('the window starts with the first hit and counts every hit in it', async (t) => {
    const hit = await makeHit(t)
    const first = await hit('a', 60_000)
    t.same(first, { current: 1, ttlMs: 60_000 }, 'a new window, whole')
    const second = await hit('a', 60_000)
    t.equal(second.current, 2)
    t.ok(second.ttlMs > 59_000 && second.ttlMs <= 60_000, `the same window, not extended (${second.ttlMs} ms left)`)
    t.equal((await hit('b', 60_000)).current, 1, 'buckets are independent')
  })

  t.test('a hit after the window ends starts a new one at 1', async (t) => {
    const hit = await makeHit(t)
    for (let i = 0; i < 5; i++) await hit('short', 100)
    t.equal((await hit('short', 100)).current, 6)
    await sleep(150)
    t.same(await hit('short', 100), { current: 1, ttlMs: 100 })
  })

  t.test('hits past the maximum keep counting (a refused request is still a request)', async (t) => {
    const hit = await makeHit(t)
    const counts = []
    for (let i = 0; i < 8; i++) counts.push((await hit('flood', 60_000)).current)
    t.same(counts, [1, 2, 3, 4, 5, 6, 7, 8])
  })
}

t.test('in process', async (t) => {
  velocitySuite(t, async () => {
    const counter = new MemoryVelocityCounter(1000)
    return async (bucket, windowMs) => counter.hit(bucket, windowMs)
  })

  t.test('past its capacity the least recently hit bucket is forgotten', async (t) => {
    const counter = new MemoryVelocityCounter(2)
    counter.hit('old', 60_000)
    counter.hit('recent', 60_000)
    counter.hit('old', 60_000)
    counter.hit('new', 60_000)
    t.equal(counter.hit('old', 60_000).current, 3, 'hit recently: kept')
    t.equal(counter.hit('recent', 60_000).current, 1, 'least recently hit: forgotten')
  })
})

t.test('on Redis (the admission scripts\' Lua function)', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  const client = await connectFailFast(server.url)
  t.teardown(() => { client.disconnect() })
  client.defineCommand('velocityHit', { lua: `${HIT_LIMIT_LUA}\nreturn { hitLimit(KEYS[1], ARGV[1]) }`, numberOfKeys: 1 })
  let run = 0
  velocitySuite(t, async () => {
    // Each test counts under its own prefix on the shared server.
    const prefix = `velocity:${run++}:`
    return async (bucket, windowMs) => {
      const [current, ttlMs] = await (client as unknown as { velocityHit: (key: string, windowMs: number) => Promise<[number, number]> }).velocityHit(prefix + bucket, windowMs)
      return { current, ttlMs }
    }
  })
})

t.test('limits are written max/window', async (t) => {
  t.same(parseRateLimit('5/15m'), { max: 5, windowMs: 900_000, spec: '5/15m' })
  t.equal(parseRateLimit('5/month'), null, 'velocity windows are fixed durations')
  t.equal(parseRateLimit('x/1m'), null)
})
