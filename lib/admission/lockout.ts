import { StoreFullError } from '../store-errors.js'

/*
 * Wrong guesses per recipient mailbox and lane (plan.ts, "Lanes"), across requestIds, sources
 * and keys. What counts is the run of consecutive failures: only a right guess resets it (or a
 * quiet period: see `resetAfterMs`). From `threshold` failures on, each further wrong guess
 * locks the mailbox's lane, for `baseMs` after the threshold-th and twice as long after each
 * one after that, up to `maxMs`. While a lane is locked, dispatch in that lane answers 429, and
 * every verify of the lane's outstanding codes consumes the code and answers like a wrong
 * guess without being compared or counted. The other lane is not affected.
 *
 * With the defaults (10, 15 min, 30 days) the 22nd consecutive wrong guess in a lane can come
 * no sooner than 15 min × (2^12 − 1) ≈ 42.7 days after the first: see README, "Security model".
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

type StoredState = LockoutState & { forgetAtMs: number }

/** A share whose states are all live is scanned for forgotten ones at most this often. */
const FULL_SHARE_SWEEP_MS = 1000

export interface MemoryLockoutOptions {
  /** The most mailboxes one share keeps a state for. */
  statesPerShare: number
  /** The share a lockout key belongs to (plan.ts: its tenant, mode and lane); one share by default. */
  shareOf?: (key: string) => string
}

/**
 * The in-process twin of LOCKOUT_LUA, for the embedded default. States live in shares of
 * `statesPerShare`, and a live state is never forgotten to make room: forgetting a run would
 * hand its attacker fresh guesses. A full share takes no new mailbox until some of its states
 * are forgotten (`hasRoom` says so beforehand, and the caller refuses the request); other
 * shares are not affected.
 */
export class MemoryLockout {
  readonly #statesPerShare: number
  readonly #shareOf: (key: string) => string
  readonly #shares = new Map<string, { states: Map<string, StoredState>, nextSweepMs: number }>()

  constructor (options: MemoryLockoutOptions) {
    this.#statesPerShare = options.statesPerShare
    this.#shareOf = options.shareOf ?? (() => '')
  }

  /** Ms left on the mailbox's lock, 0 when it is not locked. */
  lockedFor (key: string, nowMs = Date.now()): number {
    const state = this.#current(key, nowMs)
    return state === undefined || state.lockedUntilMs <= nowMs ? 0 : state.lockedUntilMs - nowMs
  }

  /** Whether a failure can be recorded for the mailbox: it has a state, or its share has room for one. */
  hasRoom (key: string, nowMs = Date.now()): boolean {
    if (this.#current(key, nowMs) !== undefined) return true
    const share = this.#shares.get(this.#shareOf(key))
    if (share === undefined || share.states.size < this.#statesPerShare) return true
    if (nowMs < share.nextSweepMs) return false
    share.nextSweepMs = nowMs + FULL_SHARE_SWEEP_MS
    for (const [stateKey, state] of share.states) if (state.forgetAtMs <= nowMs) share.states.delete(stateKey)
    return share.states.size < this.#statesPerShare
  }

  /** One more failure; returns the ms of the lock it starts (0 when none). */
  recordFailure (key: string, policy: LockoutPolicy, nowMs = Date.now()): number {
    if (!this.hasRoom(key, nowMs)) throw new StoreFullError('lockout share', 'Too many recipients have recent wrong codes; retry later')
    const state = this.#current(key, nowMs) ?? { failures: 0, lockedUntilMs: 0, forgetAtMs: 0 }
    state.failures++
    const lockMs = lockDurationMs(policy, state.failures)
    if (lockMs > 0) state.lockedUntilMs = nowMs + lockMs
    state.forgetAtMs = nowMs + lockMs + policy.resetAfterMs
    this.#share(key).states.set(key, state)
    return lockMs
  }

  clear (key: string): boolean {
    const states = this.#shares.get(this.#shareOf(key))?.states
    return states?.delete(key) ?? false
  }

  #share (key: string): { states: Map<string, StoredState>, nextSweepMs: number } {
    const name = this.#shareOf(key)
    let share = this.#shares.get(name)
    if (share === undefined) {
      share = { states: new Map(), nextSweepMs: 0 }
      this.#shares.set(name, share)
    }
    return share
  }

  #current (key: string, nowMs: number): StoredState | undefined {
    const states = this.#shares.get(this.#shareOf(key))?.states
    const state = states?.get(key)
    if (state === undefined || state.forgetAtMs > nowMs) return state
    states?.delete(key)
    return undefined
  }
}
