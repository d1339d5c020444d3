export interface RetrySchedule {
  /** Delay before the first retry; each later one doubles. */
  baseMs: number
  /** No delay is longer than this. */
  maxDelayMs: number
  /** A delivery still failing this long after it was queued goes to the dead letters. */
  forMs: number
}

/**
 * The delay before attempt `failedAttempts + 1`: exponential (base × 2^(n-1), capped), with
 * "equal jitter" (half fixed, half random) so that the deliveries of a failed endpoint do not
 * all come back at once while the schedule stays predictable to a factor of two.
 */
export function retryDelayMs (schedule: RetrySchedule, failedAttempts: number, random: () => number = Math.random): number {
  const exponential = Math.min(schedule.maxDelayMs, schedule.baseMs * 2 ** Math.min(40, Math.max(0, failedAttempts - 1)))
  return Math.round(exponential / 2 + random() * exponential / 2)
}

/** Whether a delivery queued at `createdAtMs` that just failed is given up. */
export function givenUp (schedule: RetrySchedule, createdAtMs: number, nowMs: number): boolean {
  return nowMs - createdAtMs >= schedule.forMs
}
