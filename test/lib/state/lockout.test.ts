import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { lockDurationMs, type LockoutPolicy } from '../../../lib/limits/lockout-policy.js'
import { lockoutKey, lockoutShare, MemoryLockout } from '../../../lib/state/memory/lockout.js'
import { LOCKOUT_LUA } from '../../../lib/state/redis/scripts.js'
import { bothLanes } from '../../../lib/admission/plan.js'
import type { KeyMode } from '../../../lib/keys/api-keys.js'
import { StoreFullError } from '../../../lib/store-errors.js'
import { redisTestOptions, redisWithClients } from '../../support/redis.js'

interface Lockout {
  lockedFor (key: string): Promise<number>
  recordFailure (key: string, policy: LockoutPolicy): Promise<number>
  clear (key: string): Promise<boolean>
  /** Returns once the key's lock has ended: a clock moved on in process, Redis's own clock polled on Redis. */
  untilUnlocked (key: string): Promise<void>
  /** Returns once the key's run is forgotten, `afterMs` after its last failure. */
  untilForgotten (key: string, afterMs: number): Promise<void>
}

/** A mailbox's lockout states in process, in its two lanes: backend, then browser. */
function laneKeys (tenantId: string, mode: KeyMode, recipientTag: string): string[] {
  return bothLanes(tenantId, mode, recipientTag).laneSubjects.map((subject) => lockoutKey(tenantId, mode, subject))
}

const POLICY: LockoutPolicy = { threshold: 3, baseMs: 1000, maxMs: 4000, resetAfterMs: 60_000 }

/** Polls `condition` until it holds, for at most 10 s. */
async function until (condition: () => Promise<boolean>, what: string): Promise<void> {
  for (const deadline = Date.now() + 10_000; !(await condition());) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await sleep(20)
  }
}

/** The contract both implementations keep: the Lua functions and their in-process twin. */
function lockoutSuite (t: Test, make: (t: Test) => Promise<Lockout>): void {
  t.test('below the threshold a run locks nothing; at it, the first lock; after it, doubling up to the cap', async (t) => {
    const lockout = await make(t)
    t.equal(await lockout.recordFailure('a', POLICY), 0)
    t.equal(await lockout.recordFailure('a', POLICY), 0)
    t.equal(await lockout.lockedFor('a'), 0, 'not locked yet')
    t.equal(await lockout.recordFailure('a', POLICY), 1000, 'the third in a row locks for the base duration')
    const left = await lockout.lockedFor('a')
    t.ok(left > 0 && left <= POLICY.baseMs, `locked, for no more than the lock it started (${left} ms left)`)
    t.equal(await lockout.recordFailure('a', POLICY), 2000, 'each further failure doubles the lock')
    t.equal(await lockout.recordFailure('a', POLICY), 4000)
    t.equal(await lockout.recordFailure('a', POLICY), 4000, 'up to the longest lock')
    t.equal(await lockout.lockedFor('b'), 0, 'mailboxes are independent')
  })

  t.test('a lock ends by itself; the run goes on until a success clears it', async (t) => {
    const lockout = await make(t)
    for (let i = 0; i < 3; i++) await lockout.recordFailure('c', POLICY)
    t.ok(await lockout.lockedFor('c') > 0, 'locked')
    await lockout.untilUnlocked('c')
    t.equal(await lockout.lockedFor('c'), 0, 'the lock ended')
    t.equal(await lockout.recordFailure('c', POLICY), 2000, 'the next failure continues the run: a longer lock')
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
    await lockout.untilForgotten('d', quick.resetAfterMs)
    t.equal(await lockout.recordFailure('d', quick), 0, 'the earlier failures were forgotten')
  })
}

t.test('the lock a run earns, and what it bounds', async (t) => {
  const defaults: LockoutPolicy = { threshold: 10, baseMs: 15 * 60_000, maxMs: 30 * 86_400_000, resetAfterMs: 30 * 86_400_000 }
  t.equal(lockDurationMs(defaults, 9), 0)
  t.equal(lockDurationMs(defaults, 10), 15 * 60_000)
  t.equal(lockDurationMs(defaults, 11), 30 * 60_000)
  t.equal(lockDurationMs(defaults, 10_000), 30 * 86_400_000, 'capped, however long the run')
  // The figures of docs/security.md, per lane: the k-th wrong guess in a row can only come once the locks
  // of the k - 1 before it have passed.
  const earliestMs = (guess: number): number => {
    let waitedMs = 0
    for (let failure = 1; failure < guess; failure++) waitedMs += lockDurationMs(defaults, failure)
    return waitedMs
  }
  t.ok(earliestMs(21) < 30 * 86_400_000, `the 21st after ${(earliestMs(21) / 86_400_000).toFixed(1)} days`)
  t.ok(earliestMs(22) > 30 * 86_400_000, `the 22nd no sooner than ${(earliestMs(22) / 86_400_000).toFixed(1)} days: at most 21 in 30 days per lane`)
  t.ok(earliestMs(100) > 365 * 86_400_000 * 5, `the 100th (NIST SP 800-63B's ceiling) after ${(earliestMs(100) / 86_400_000 / 365).toFixed(1)} years`)

  // The yearly figure of one lane: the attacker's best plan makes runs of k wrong guesses,
  // then waits out the last lock and the quiet period that forgets the run.
  const yearMs = 365 * 86_400_000
  let perLane = 0
  for (let k = 1; k <= 60; k++) {
    const cycleMs = earliestMs(k) + lockDurationMs(defaults, k) + defaults.resetAfterMs
    const cycles = Math.floor(yearMs / cycleMs)
    let guesses = cycles * k
    for (let guess = 1; guess <= k && earliestMs(guess) <= yearMs - cycles * cycleMs; guess++) guesses++
    perLane = Math.max(perLane, guesses)
  }
  t.equal(perLane, 204, 'at most 204 guesses a year against one mailbox in one lane: P(success) ≤ 204 × 10⁻⁶ ≈ 2.0 × 10⁻⁴')
  // A stranger holds public keys only: every code he can guess is one he asked for through a
  // restricted key (requestIds are secret), so all his guesses count in the browser lane, the
  // same lane from any source and through any of the tenant's keys (the state is keyed by
  // tenant, mode, lane and mailbox, nothing else).
  const [backendLane, browserLane] = laneKeys('acme', 'live', 'tag')
  t.not(lockoutShare(backendLane ?? ''), lockoutShare(browserLane ?? ''), 'the two lanes are two states')
  const stranger = perLane
  t.equal(stranger, 204, `a stranger with any number of sources and public keys: ≤ ${stranger} guesses a year, P ≤ ${(stranger * 1e-6).toExponential(1)}`)
  const bothLanes = 2 * perLane
  t.equal(bothLanes, 408, `one who can also drive the partner's backend: ≤ ${bothLanes} a year in both lanes, P ≤ ${(bothLanes * 1e-6).toExponential(1)}`)
})

t.test('in process', async (t) => {
  lockoutSuite(t, async () => {
    let now = 1_000_000
    const lockout = new MemoryLockout({ statesPerShare: 1000 })
    return {
      lockedFor: async (key) => lockout.lockedFor(key, now),
      recordFailure: async (key, policy) => lockout.recordFailure(key, policy, now),
      clear: async (key) => lockout.clear(key),
      untilUnlocked: async (key) => { now += lockout.lockedFor(key, now) },
      untilForgotten: async (_key, afterMs) => { now += afterMs }
    }
  })

  t.test('a full share takes no new mailbox and forgets no live run; other shares go on', async (t) => {
    const lockout = new MemoryLockout({ statesPerShare: 2, shareOf: lockoutShare })
    const policy = { ...POLICY, resetAfterMs: 10_000 }
    const [ada, adaPage] = laneKeys('acme', 'live', 'ada')
    const [, bobPage] = laneKeys('acme', 'live', 'bob')
    const [, eve] = laneKeys('acme', 'live', 'eve')
    const [, globex] = laneKeys('globex', 'live', 'eve')
    if (ada === undefined || adaPage === undefined || bobPage === undefined || eve === undefined || globex === undefined) throw new Error('two lanes')
    let now = 0
    lockout.recordFailure(adaPage, policy, now)
    lockout.recordFailure(bobPage, policy, now)
    t.equal(lockout.hasRoom(eve, now), false, 'the browser lane of acme is full')
    t.throws(() => lockout.recordFailure(eve, policy, now), StoreFullError, 'a failure that cannot be kept is refused, not dropped')
    t.equal(lockout.hasRoom(adaPage, now), true, 'a mailbox with a run goes on')
    t.equal(lockout.recordFailure(adaPage, policy, now), 0)
    t.equal(lockout.recordFailure(adaPage, policy, now), 1000, 'its run was kept whole: the third locks')
    t.equal(lockout.hasRoom(ada, now), true, 'the backend lane is another share')
    t.equal(lockout.hasRoom(globex, now), true, 'and so is every other tenant')
    now += 10_001
    t.equal(lockout.hasRoom(eve, now), true, 'a forgotten run (bob\'s) makes room')
    t.equal(lockout.lockedFor(adaPage, now), 0)
  })
})

t.test('on Redis (the admission scripts\' Lua functions)', redisTestOptions(), async (t) => {
  const { client } = await redisWithClients(t)
  client.defineCommand('lockedFor', { lua: `${LOCKOUT_LUA}\nreturn lockedFor(KEYS[1], lockoutNow())`, numberOfKeys: 1 })
  client.defineCommand('recordFailure', { lua: `${LOCKOUT_LUA}\nreturn recordFailure(KEYS[1], lockoutNow(), tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))`, numberOfKeys: 1 })
  client.defineCommand('clearLockout', { lua: `${LOCKOUT_LUA}\nreturn clearLockout(KEYS[1])`, numberOfKeys: 1 })
  const commands = client as unknown as Record<'lockedFor' | 'clearLockout', (key: string) => Promise<number>> & { recordFailure: (key: string, ...args: number[]) => Promise<number> }
  let run = 0
  lockoutSuite(t, async () => {
    const prefix = `lockout-test:${run++}:`
    const lockedFor = async (key: string): Promise<number> => await commands.lockedFor(prefix + key)
    return {
      lockedFor,
      recordFailure: async (key, policy) => await commands.recordFailure(prefix + key, policy.threshold, policy.baseMs, policy.maxMs, policy.resetAfterMs),
      clear: async (key) => await commands.clearLockout(prefix + key) > 0,
      untilUnlocked: async (key) => { await until(async () => await lockedFor(key) === 0, `${key} is unlocked`) },
      // The run expires with its key.
      untilForgotten: async (key) => { await until(async () => await client.exists(prefix + key) === 0, `${key} is forgotten`) }
    }
  })
})
