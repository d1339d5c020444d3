import { LruMap } from 'toad-cache'

/*
 * Wrong guesses per recipient mailbox, across requestIds. What counts is the run of
 * consecutive failures: only a right guess resets it (or a quiet period: see `resetAfterMs`).
 * From `threshold` failures on, each further wrong guess locks the mailbox, for `baseMs`
 * after the threshold-th and twice as long after each one after that, up to `maxMs`. While
 * it is locked, dispatch to the mailbox answers 429, and every verify of its outstanding codes
 * consumes the code and answers like a wrong guess without being compared or counted.
 *
 * With the defaults (10, 15 min, 30 days) the 22nd consecutive wrong guess can come no sooner
 * than 15 min × (2^12 − 1) ≈ 42.7 days after the first: see README, "Security model".
 *
 * The state lives twice, with one contract checked by one shared test
 * (test/lib/admission/lockout.test.ts): as Lua functions for the admission scripts, and as
 * MemoryLockout in process.
 */

export interface LockoutPolicy {
  /** Consecutive wrong guesses that lock the mailbox for the first time. */
  threshold: number
  /** Length of the first lock; each further wrong guess doubles it. */
  baseMs: number
  /** Longest lock. */
  maxMs: number
  /** A run of failures is forgotten this long after its last wrong guess or the end of its lock. */
  resetAfterMs: number
}

/** The lock a run of `failures` consecutive wrong guesses earns, in ms (0 below the threshold). */
export function lockDurationMs (policy: LockoutPolicy, failures: number): number {
  if (failures < policy.threshold) return 0
  // Capped before exponentiation so the doubling cannot overflow.
  const doublings = Math.min(failures - policy.threshold, 60)
  return Math.min(policy.maxMs, policy.baseMs * 2 ** doublings)
}

/** A mailbox's state: its run of consecutive failures and until when it is locked (epoch ms, 0: not locked). */
export interface LockoutState {
  failures: number
  lockedUntilMs: number
}

/**
 * The state as a Redis hash `{ f: failures, u: locked until (epoch ms) }`. The clock is
 * Redis's own (TIME), so every instance agrees on when a lock ends.
 *
 * - `lockoutNow()`: milliseconds since the epoch, by the server.
 * - `lockedFor(key, now)`: ms left on the mailbox's lock, 0 when it is not locked.
 * - `recordFailure(key, now, threshold, baseMs, maxMs, resetAfterMs)`: one more failure; returns
 *   the ms of the lock it starts (0 when none).
 * - `clearLockout(key)`: a right guess, or a tenant clearing the lock.
 */
export const LOCKOUT_LUA = `
local function lockoutNow ()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local function lockedFor (key, now)
  local lockedUntil = tonumber(redis.call('HGET', key, 'u') or '0')
  if lockedUntil > now then return lockedUntil - now end
  return 0
end
local function recordFailure (key, now, threshold, baseMs, maxMs, resetAfterMs)
  local failures = redis.call('HINCRBY', key, 'f', 1)
  local lockMs = 0
  if failures >= threshold then
    lockMs = math.min(maxMs, baseMs * 2 ^ math.min(failures - threshold, 60))
    redis.call('HSET', key, 'u', now + lockMs)
  end
  redis.call('PEXPIRE', key, lockMs + resetAfterMs)
  return lockMs
end
local function clearLockout (key)
  return redis.call('DEL', key)
end
`

/** The in-process twin of LOCKOUT_LUA, for the embedded default. */
export class MemoryLockout {
  readonly #states: LruMap<LockoutState & { forgetAtMs: number }>

  constructor (maxMailboxes: number) {
    this.#states = new LruMap(maxMailboxes)
  }

  /** Ms left on the mailbox's lock, 0 when it is not locked. */
  lockedFor (key: string, nowMs = Date.now()): number {
    const state = this.#current(key, nowMs)
    return state === undefined || state.lockedUntilMs <= nowMs ? 0 : state.lockedUntilMs - nowMs
  }

  /** One more failure; returns the ms of the lock it starts (0 when none). */
  recordFailure (key: string, policy: LockoutPolicy, nowMs = Date.now()): number {
    const state = this.#current(key, nowMs) ?? { failures: 0, lockedUntilMs: 0, forgetAtMs: 0 }
    state.failures++
    const lockMs = lockDurationMs(policy, state.failures)
    if (lockMs > 0) state.lockedUntilMs = nowMs + lockMs
    state.forgetAtMs = nowMs + lockMs + policy.resetAfterMs
    this.#states.set(key, state)
    return lockMs
  }

  clear (key: string): boolean {
    const known = this.#states.get(key) !== undefined
    this.#states.delete(key)
    return known
  }

  #current (key: string, nowMs: number): (LockoutState & { forgetAtMs: number }) | undefined {
    const state = this.#states.get(key)
    if (state === undefined || state.forgetAtMs > nowMs) return state
    this.#states.delete(key)
    return undefined
  }
}
