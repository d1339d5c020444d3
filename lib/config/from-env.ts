import type { RedisTopology } from '../state/index.js'
import { tracingConfig } from '../telemetry/config.js'
import { abuseConfig } from './abuse.js'
import { durationMs, validEnv } from './env.js'
import { ConfigError } from './error.js'
import { feedbackConfig } from './feedback.js'
import { limitsConfig } from './limits.js'
import { listenerConfig } from './listener.js'
import { mailConfig } from './mail.js'
import { proxyConfig } from './proxy.js'
import { redisTopology, stateConfig } from './redis.js'
import { reputationConfig } from './reputation.js'
import { signingConfig } from './signing.js'
import { tenantsConfig } from './tenants.js'
import type { Config } from './types.js'
import { webhooksConfig } from './webhooks.js'

export { ConfigError }

/**
 * Validates the environment once; throws ConfigError naming the first bad variable. The
 * schema (schemas/env.ts) checks each value; each concern's module then reads its part of
 * Config and checks what its variables must agree on. A new setting is an entry in the schema,
 * and a field of its concern's part and the line that reads it, in that concern's module.
 */
export function parseConfig (source: Readonly<Record<string, string | undefined>>): Config {
  const env = validEnv(source)
  const redis = redisTopology(env)
  const signing = signingConfig(env, redis?.variable ?? null)
  const mail = mailConfig(env)
  const feedback = feedbackConfig(env)
  const listener = listenerConfig(env)
  const proxy = proxyConfig(env)
  const abuse = abuseConfig(env)
  const tenants = tenantsConfig(env, abuse.blocklists)
  const limits = limitsConfig(env)
  const state = stateConfig(env, redis)
  return {
    ...listener,
    ...tenants,
    ...state,
    ...signing,
    ...mail,
    ...feedback,
    ...reputationConfig(env),
    ...proxy,
    ...abuse,
    ...limits,
    ...webhooksConfig(env),
    tracing: tracingConfig(env, (variable, problem) => new ConfigError(variable, problem))
  }
}

/**
 * What a tool working on the service's Redis needs (the webhooks and tenants CLIs): the
 * topology, the webhook queue's per-tenant cap and the reputation window, checked as for the
 * service, and nothing the tool does not use (no OTP_HMAC_KEYS: it signs nothing).
 */
export function parseRedisToolConfig (source: Readonly<Record<string, string | undefined>>): { redis: RedisTopology | null, redisVariable: string | null, webhooks: { maxQueuedPerTenant: number }, reputationWindowMs: number } {
  const env = validEnv(source)
  const redis = redisTopology(env)
  const { reputation } = reputationConfig(env)
  return {
    redis: redis?.topology ?? null,
    redisVariable: redis?.variable ?? null,
    webhooks: { maxQueuedPerTenant: env.WEBHOOK_MAX_QUEUED_PER_TENANT },
    reputationWindowMs: reputation?.windowMs ?? durationMs(env, 'REPUTATION_WINDOW')
  }
}
