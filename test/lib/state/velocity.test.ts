import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import type { WindowCount } from '../../../lib/state/admission.js'
import { MemoryVelocityCounter } from '../../../lib/state/memory/velocity.js'
import { HIT_LIMIT_LUA } from '../../../lib/state/redis/scripts.js'
import { parseRateLimit } from '../../../lib/limits/rate-limit.js'
import { redisTestOptions, redisWithClients } from '../../support/redis.js'

interface Counter {
  hit: (bucket: string, windowMs: number) => Promise<WindowCount>
  /** Returns once the bucket's window has ended: a clock moved on in process, the key's expiry polled on Redis. */
  untilEnded: (bucket: string, windowMs: number) => Promise<void>
}

/** The fixed-window contract both counters keep: the Lua function and its in-process twin. */
function velocitySuite (t: Test, makeCounter: (t: Test) => Promise<Counter>): void {
  t.test('the window starts with the first hit and counts every hit in it', async (t) => {
    const { hit } = await makeCounter(t)
    const first = await hit('a', 60_000)
    t.same(first, { current: 1, ttlMs: 60_000 }, 'a new window, whole')
    const second = await hit('a', 60_000)
    t.equal(second.current, 2)
    t.ok(second.ttlMs > 0 && second.ttlMs <= first.ttlMs, `the same window, not extended (${second.ttlMs} ms left)`)
    t.equal((await hit('b', 60_000)).current, 1, 'buckets are independent')
  })

  t.test('a hit after the window ends starts a new one at 1', async (t) => {
    const { hit, untilEnded } = await makeCounter(t)
    for (let i = 0; i < 5; i++) await hit('short', 3000)
    t.equal((await hit('short', 3000)).current, 6)
    await untilEnded('short', 3000)
    t.same(await hit('short', 3000), { current: 1, ttlMs: 3000 })
  })

  t.test('hits past the maximum keep counting (a refused request is still a request)', async (t) => {
    const { hit } = await makeCounter(t)
    const counts = []
    for (let i = 0; i < 8; i++) counts.push((await hit('flood', 60_000)).current)
    t.same(counts, [1, 2, 3, 4, 5, 6, 7, 8])
  })
}

t.test('in process', async (t) => {
  velocitySuite(t, async () => {
    let now = 1_000_000
    const counter = new MemoryVelocityCounter(1000)
    return {
      hit: async (bucket, windowMs) => counter.hit('share', bucket, windowMs, now),
      untilEnded: async (_bucket, windowMs) => { now += windowMs }
    }
  })

  t.test('past a share\'s capacity its least recently hit bucket is forgotten, and no other share\'s', async (t) => {
    const counter = new MemoryVelocityCounter(2)
    counter.hit('acme', 'old', 60_000)
    counter.hit('acme', 'recent', 60_000)
    counter.hit('globex', 'kept', 60_000)
    counter.hit('acme', 'old', 60_000)
    counter.hit('acme', 'new', 60_000)
    t.equal(counter.hit('acme', 'old', 60_000).current, 3, 'hit recently: kept')
    t.equal(counter.hit('acme', 'recent', 60_000).current, 1, 'least recently hit: forgotten')
    for (let i = 0; i < 1000; i++) counter.hit('acme', `flood-${i}`, 60_000)
    t.equal(counter.hit('globex', 'kept', 60_000).current, 2, 'a flood in one share leaves another share\'s buckets alone')
  })
})

t.test('on Redis (the admission scripts\' Lua function)', redisTestOptions(), async (t) => {
  const { client } = await redisWithClients(t)
  client.defineCommand('velocityHit', { lua: `${HIT_LIMIT_LUA}\nreturn { hitLimit(KEYS[1], ARGV[1]) }`, numberOfKeys: 1 })
  let run = 0
  velocitySuite(t, async () => {
    // Each test counts under its own prefix on the shared server.
    const prefix = `velocity:${run++}:`
    return {
      hit: async (bucket, windowMs) => {
        const [current, ttlMs] = await (client as unknown as { velocityHit: (key: string, windowMs: number) => Promise<[number, number]> }).velocityHit(prefix + bucket, windowMs)
        return { current, ttlMs }
      },
      // The window ends with its key (PEXPIRE), on Redis's own clock.
      untilEnded: async (bucket) => {
        for (const deadline = Date.now() + 10_000; await client.exists(prefix + bucket) === 1;) {
          if (Date.now() > deadline) throw new Error(`the window of ${bucket} did not end`)
          await sleep(20)
        }
      }
    }
  })
})

t.test('limits are written max/window', async (t) => {
  t.same(parseRateLimit('5/15m'), { max: 5, windowMs: 900_000, spec: '5/15m' })
  t.equal(parseRateLimit('5/month'), null, 'velocity windows are fixed durations')
  t.equal(parseRateLimit('x/1m'), null)
})
