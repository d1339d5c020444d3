import type { Env } from '../../schemas/env.js'
import { durationMs } from './env.js'

/** What is refused of a source before its key is looked at: block lists, open connections, the pace of its refusals. */
export interface AbuseConfig {
  blocklists: { ipSources: string[], torSource: string | null, refreshMs: number }
  maxConnectionsPerSource: number
  /** How refusals to one source are paced (lib/net/refusal-pacing.ts); null when off. */
  refusalPace: { perSecond: number, burst: number, maxDelayMs: number } | null
}

export function abuseConfig (env: Env): AbuseConfig {
  return {
    blocklists: {
      ipSources: (env.IP_BLOCKLISTS ?? '').split(',').map((entry) => entry.trim()).filter((entry) => entry !== ''),
      torSource: env.TOR_EXIT_LIST ?? null,
      refreshMs: durationMs(env, 'BLOCKLIST_REFRESH_SECONDS')
    },
    maxConnectionsPerSource: env.MAX_CONNECTIONS_PER_SOURCE,
    refusalPace: env.REFUSAL_PACE_PER_SECOND === 0 ? null : { perSecond: env.REFUSAL_PACE_PER_SECOND, burst: env.REFUSAL_PACE_BURST, maxDelayMs: durationMs(env, 'REFUSAL_PACE_MAX_DELAY_MS') }
  }
}
