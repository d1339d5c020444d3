import type { Env } from '../../schemas/env.js'
import { durationMs, parseCidrList } from './env.js'

/** Webhook delivery: its bounds per endpoint and tenant, its retries, where targets may connect. */
export interface WebhooksConfig {
  webhooks: {
    timeoutMs: number
    concurrencyPerEndpoint: number
    maxInFlightPerTenant: number
    maxQueuedPerTenant: number
    retry: { baseMs: number, maxDelayMs: number, forMs: number }
    allowHttpLoopback: boolean
    allowedNetworks: string[]
  }
}

export function webhooksConfig (env: Env): WebhooksConfig {
  const retryBaseMs = durationMs(env, 'WEBHOOK_RETRY_BASE_MS')
  return {
    webhooks: {
      timeoutMs: durationMs(env, 'WEBHOOK_TIMEOUT_MS'),
      concurrencyPerEndpoint: env.WEBHOOK_CONCURRENCY_PER_ENDPOINT,
      maxInFlightPerTenant: env.WEBHOOK_MAX_IN_FLIGHT_PER_TENANT,
      maxQueuedPerTenant: env.WEBHOOK_MAX_QUEUED_PER_TENANT,
      retry: {
        baseMs: retryBaseMs,
        maxDelayMs: Math.max(retryBaseMs, durationMs(env, 'WEBHOOK_RETRY_MAX_DELAY_MS')),
        forMs: durationMs(env, 'WEBHOOK_RETRY_FOR')
      },
      allowHttpLoopback: env.WEBHOOK_ALLOW_HTTP_LOOPBACK === 'true',
      allowedNetworks: parseCidrList('WEBHOOK_ALLOWED_NETWORKS', env.WEBHOOK_ALLOWED_NETWORKS)
    }
  }
}
