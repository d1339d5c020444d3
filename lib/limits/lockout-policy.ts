/** How a run of wrong guesses locks a mailbox's lane (below). */
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

/*
 * Wrong guesses per recipient mailbox and lane (lib/admission/plan.ts, "Lanes"), across requestIds, sources
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
 * (test/lib/state/lockout.test.ts): as Lua functions for the admission scripts
 * (lib/state/redis/scripts.ts), and as MemoryLockout in process (lib/state/memory/lockout.ts).
 */

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
