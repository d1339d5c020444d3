import type { Env } from '../../schemas/env.js'
import { durationMs } from './env.js'
import { ConfigError } from './error.js'

/** The listeners (public and internal), their timeouts and body limit, logging, the shutdown drain. */
export interface ListenerConfig {
  host: string
  port: number
  logLevel: Env['LOG_LEVEL']
  bodyLimitBytes: number
  metricsToken: string | null
  /** The internal listener for /metrics and readiness details; null when METRICS_PORT is unset. */
  metricsListener: { host: string, port: number } | null
  requestTimeoutMs: number
  captchaTimeoutMs: number
  keepAliveTimeoutMs: number
  shutdownGraceMs: number
  shutdownDrainMs: number
}

export function listenerConfig (env: Env): ListenerConfig {
  if (env.METRICS_HOST !== undefined && env.METRICS_PORT === undefined) {
    throw new ConfigError('METRICS_HOST', 'is only used with METRICS_PORT')
  }
  if (env.METRICS_PORT !== undefined && env.METRICS_PORT !== 0 && env.METRICS_PORT === env.PORT) {
    throw new ConfigError('METRICS_PORT', `must differ from PORT (${env.PORT}): the internal listener is a listener of its own`)
  }
  return {
    host: env.HOST,
    port: env.PORT,
    logLevel: env.LOG_LEVEL,
    bodyLimitBytes: env.BODY_LIMIT_BYTES,
    metricsToken: env.METRICS_TOKEN ?? null,
    metricsListener: env.METRICS_PORT === undefined ? null : { host: env.METRICS_HOST ?? '127.0.0.1', port: env.METRICS_PORT },
    requestTimeoutMs: durationMs(env, 'REQUEST_TIMEOUT_MS'),
    captchaTimeoutMs: durationMs(env, 'CAPTCHA_TIMEOUT_MS'),
    keepAliveTimeoutMs: durationMs(env, 'KEEP_ALIVE_TIMEOUT_MS'),
    shutdownGraceMs: durationMs(env, 'SHUTDOWN_GRACE_MS'),
    shutdownDrainMs: durationMs(env, 'SHUTDOWN_DRAIN_MS')
  }
}
