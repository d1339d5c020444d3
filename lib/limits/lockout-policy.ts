/** How a run of wrong guesses locks a mailbox's lane (lib/admission/lockout.ts). */
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
