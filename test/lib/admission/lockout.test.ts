import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { LOCKOUT_LUA, MemoryLockout, lockDurationMs, type LockoutPolicy } from '../../../lib/admission/lockout.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../support/redis.js'

interface Lockout {
  lockedFor (key: string): Promise<number>
  recordFailure (key: string, policy: LockoutPolicy): Promise<number>
  clear (key: string): Promise<boolean>
}

const POLICY: LockoutPolicy = { threshold: 3, baseMs: 200, maxMs: 800, resetAfterMs: 60_000 }

/** The contract both implementations keep: the Lua functions and their in-process twin. */
function lockoutSuite (t: Test, make: (t: Test) => Promise<Lockout>): void {
  t.test('below the threshold a run locks nothing; at it, the first lock; after it, doubling up to the cap', async (t) => {
    const lockout = await make(t)
    t.equal(await lockout.recordFailure('a', POLICY), 0)
    t.equal(await lockout.recordFailure('a', POLICY), 0)
    t.equal(await lockout.lockedFor('a'), 0, 'not locked yet')
    t.equal(await lockout.recordFailure('a', POLICY), 200, 'the third in a row locks for the base duration')
    const left = await lockout.lockedFor('a')
    t.ok(left > 100 && left <= 200, `locked (${left} ms left)`)
    t.equal(await lockout.recordFailure('a', POLICY), 400, 'each further failure doubles the lock')
    t.equal(await lockout.recordFailure('a', POLICY), 800)
    t.equal(await lockout.recordFailure('a', POLICY), 800, 'up to the longest lock')
    t.equal(await lockout.lockedFor('b'), 0, 'mailboxes are independent')
  })

  t.test('a lock ends by itself; the run goes on until a success clears it', async (t) => {
    const lockout = await make(t)
    for (let i = 0; i < 3; i++) await lockout.recordFailure('c', POLICY)
    await sleep(250)
    t.equal(await lockout.lockedFor('c'), 0, 'the lock ended')
    t.equal(await lockout.recordFailure('c', POLICY), 400, 'the next failure continues the run: a longer lock')
    t.equal(await lockout.clear('c'), true)
    t.equal(await lockout.lockedFor('c'), 0, 'cleared')
    t.equal(await lockout.recordFailure('c', POLICY), 0, 'a cleared run starts from zero')
    t.equal(await lockout.clear('never'), false)
  })

  t.test('a run is forgotten after a quiet period', async (t) => {
    const lockout = await make(t)
    const quick = { ...POLICY, resetAfterMs: 100 }
    await lockout.recordFailure('d', quick)
    await lockout.recordFailure('d', quick)
    await sleep(200)
    t.equal(await lockout.recordFailure('d', quick), 0, 'the earlier failures were forgotten')
  })
}

t.test('the lock a run earns', async (t) => {
  const defaults: LockoutPolicy = { threshold: 10, baseMs: 15 * 60_000, maxMs: 30 * 86_400_000, resetAfterMs: 30 * 86_400_000 }
  t.equal(lockDurationMs(defaults, 9), 0)
  t.equal(lockDurationMs(defaults, 10), 15 * 60_000)
  t.equal(lockDurationMs(defaults, 11), 30 * 60_000)
  t.equal(lockDurationMs(defaults, 10_000), 30 * 86_400_000, 'capped, however long the run')
  // The README's figure: the k-th wrong guess in a row can only come once the locks of the
  // k - 1 before it have passed.
  const earliestMs = (guess: number): number => {
    let waitedMs = 0
    for (let failure = 1; failure < guess; failure++) waitedMs += lockDurationMs(defaults, failure)
    return waitedMs
  }
  t.ok(earliestMs(21) < 30 * 86_400_000, `the 21st after ${(earliestMs(21) / 86_400_000).toFixed(1)} days`)
  t.ok(earliestMs(22) > 30 * 86_400_000, `the 22nd no sooner than ${(earliestMs(22) / 86_400_000).toFixed(1)} days: at most 21 in 30 days`)
  t.ok(earliestMs(100) > 365 * 86_400_000 * 5, `the 100th (NIST SP 800-63B's ceiling) after ${(earliestMs(100) / 86_400_000 / 365).toFixed(1)} years`)

  // The README's yearly figure: the attacker's best plan makes runs of k wrong guesses, then
  // waits out the last lock and the quiet period that forgets the run.
  const yearMs = 365 * 86_400_000
  let best = 0
  for (let k = 1; k <= 60; k++) {
    const cycleMs = earliestMs(k) + lockDurationMs(defaults, k) + defaults.resetAfterMs
    const cycles = Math.floor(yearMs / cycleMs)
    let guesses = cycles * k
    for (let guess = 1; guess <= k && earliestMs(guess) <= yearMs - cycles * cycleMs; guess++) guesses++
    best = Math.max(best, guesses)
  }
  t.equal(best, 204, 'at most 204 guesses a year against one mailbox: P(success) ≤ 204 × 10⁻⁶ ≈ 2.0 × 10⁻⁴')
})

t.test('in process', async (t) => {
  lockoutSuite(t, async () => {
    const lockout = new MemoryLockout(1000)
    return {
      lockedFor: async (key) => lockout.lockedFor(key),
      recordFailure: async (key, policy) => lockout.recordFailure(key, policy),
      clear: async (key) => lockout.clear(key)
    }
  })
})

t.test('on Redis (the admission scripts\' Lua functions)', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  const client = await connectFailFast(server.url)
  t.teardown(() => { client.disconnect() })
  client.defineCommand('lockedFor', { lua: `${LOCKOUT_LUA}\nreturn lockedFor(KEYS[1], lockoutNow())`, numberOfKeys: 1 })
  client.defineCommand('recordFailure', { lua: `${LOCKOUT_LUA}\nreturn recordFailure(KEYS[1], lockoutNow(), tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))`, numberOfKeys: 1 })
  client.defineCommand('clearLockout', { lua: `${LOCKOUT_LUA}\nreturn clearLockout(KEYS[1])`, numberOfKeys: 1 })
  const commands = client as unknown as Record<'lockedFor' | 'clearLockout', (key: string) => Promise<number>> & { recordFailure: (key: string, ...args: number[]) => Promise<number> }
  let run = 0
  lockoutSuite(t, async () => {
    const prefix = `lockout-test:${run++}:`
    return {
      lockedFor: async (key) => await commands.lockedFor(prefix + key),
      recordFailure: async (key, policy) => await commands.recordFailure(prefix + key, policy.threshold, policy.baseMs, policy.maxMs, policy.resetAfterMs),
      clear: async (key) => await commands.clearLockout(prefix + key) > 0
    }
  })
})
