import type { Env } from '../../schemas/env.js'
import { REPUTATION_BUCKET_MS, type ReputationThresholds } from '../state/reputation.js'
import { durationMs } from './env.js'
import { ConfigError } from './error.js'

/** The guard on the shared sending reputation (docs/reputation.md). */
export interface ReputationConfig {
  /** Null when both rates are `off`: nothing is counted, no tenant is ever paused. */
  reputation: (ReputationThresholds & { windowMs: number, windowSpec: string }) | null
}

const rate = (value: string): number | null => value === 'off' ? null : Number(value)

export function reputationConfig (env: Env): ReputationConfig {
  const bounceRate = rate(env.REPUTATION_BOUNCE_RATE)
  const complaintRate = rate(env.REPUTATION_COMPLAINT_RATE)
  const windowMs = durationMs(env, 'REPUTATION_WINDOW')
  // The window is a number of hourly buckets: a part of an hour would count as a whole one.
  if (windowMs % REPUTATION_BUCKET_MS !== 0) throw new ConfigError('REPUTATION_WINDOW', `must be whole hours (got ${JSON.stringify(env.REPUTATION_WINDOW)})`)
  if (bounceRate === null && complaintRate === null) return { reputation: null }
  return { reputation: { bounceRate, complaintRate, minSends: env.REPUTATION_MIN_SENDS, windowMs, windowSpec: env.REPUTATION_WINDOW } }
}
