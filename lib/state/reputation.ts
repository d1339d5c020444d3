/** The counts of a tenant's live mail over the window: what left, and what came back as a permanent bounce or a complaint. */
export interface ReputationCounts {
  sent: number
  bounced: number
  complained: number
}

export type ReputationEvent = keyof ReputationCounts

/** The rates at which a tenant's live sending pauses (null: that rate pauses no one), and the volume below which none does. */
export interface ReputationThresholds {
  bounceRate: number | null
  complaintRate: number | null
  minSends: number
}

/** A tenant's pause as every instance reads it: when it began and the counts that caused it. */
export interface SendingPause extends ReputationCounts {
  sinceMs: number
  /**
   * Set when the stored pause could not be read (a manual write, a format of another version):
   * why. The tenant counts as paused all the same, its counts and `sinceMs` as 0.
   */
  unreadable?: string
}

/** A stored pause as JSON, read on its own: one that cannot be read is still a pause (fail closed), marked `unreadable`. */
export function parsePause (json: string): SendingPause {
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch (error) {
    return unreadablePause((error as Error).message)
  }
  const fields = value as Partial<Record<keyof SendingPause, unknown>> | null
  const numbers = ['sent', 'bounced', 'complained', 'sinceMs'] as const
  if (typeof fields !== 'object' || fields === null || !numbers.every((name) => Number.isFinite(fields[name]))) {
    return unreadablePause(`not a pause (${numbers.join(', ')} as numbers)`)
  }
  return { sent: fields.sent as number, bounced: fields.bounced as number, complained: fields.complained as number, sinceMs: fields.sinceMs as number }
}

function unreadablePause (reason: string): SendingPause {
  return { sent: 0, bounced: 0, complained: 0, sinceMs: 0, unreadable: reason }
}

/** The window is counted in buckets of an hour: a read sums the window's buckets, and old ones expire. */
export const REPUTATION_BUCKET_MS = 3_600_000

/** The bucket a moment falls in. */
export function reputationBucket (ms: number): number {
  return Math.floor(ms / REPUTATION_BUCKET_MS)
}

/** The buckets a window ending at `nowMs` covers, oldest first: the current hour and the whole ones before it. */
export function windowBuckets (nowMs: number, windowMs: number): number[] {
  const last = reputationBucket(nowMs)
  const count = Math.max(1, Math.round(windowMs / REPUTATION_BUCKET_MS))
  return Array.from({ length: count }, (_, index) => last - count + 1 + index)
}

/** Whether counts are past the thresholds: enough sends, and a rate at or above its threshold. */
export function pastThresholds (counts: ReputationCounts, thresholds: ReputationThresholds): boolean {
  if (counts.sent < thresholds.minSends || counts.sent === 0) return false
  if (thresholds.bounceRate !== null && counts.bounced / counts.sent >= thresholds.bounceRate) return true
  return thresholds.complaintRate !== null && counts.complained / counts.sent >= thresholds.complaintRate
}

/**
 * Each tenant's live sending reputation: counts in hourly buckets over a rolling window, and
 * the pauses every instance shares. `count` never throws and is never awaited by a dispatch:
 * on Redis it is queued in process and written a turn later, several counts of one tenant and
 * hour as one increment (a count lost with a crashed process or a failed write only makes a
 * rate less exact). Both implementations pass test/lib/state/reputation.test.ts.
 */
export interface ReputationStore {
  count (tenantId: string, event: ReputationEvent, atMs: number): void
  /** Resolves once every count queued so far was written (or given up). */
  flush (): Promise<void>
  /** The sums of the window ending at `nowMs`. */
  window (tenantId: string, nowMs: number): Promise<ReputationCounts>
  /** Pauses the tenant: true when it was not paused already (the caller announces it, once across instances). */
  pause (tenantId: string, pause: SendingPause): Promise<boolean>
  /** Every paused tenant. */
  paused (): Promise<Map<string, SendingPause>>
  /** Lifts the tenant's pause; with `forget`, its counts start afresh too. The pause it lifted, or null. */
  resume (tenantId: string, options: { forget: boolean, nowMs: number }): Promise<SendingPause | null>
  close (): Promise<void>
}
