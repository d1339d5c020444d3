import type { Env } from '../../schemas/env.js'
import type { LockoutPolicy } from '../limits/lockout-policy.js'
import type { RateLimit, VelocityLimits } from '../limits/rate-limit.js'
import { durationMs, rateLimit } from './env.js'
import { ConfigError } from './error.js'

/** The velocity limits of admission and of the other routes, the guess lockout, the IPv6 bucket. */
export interface LimitsConfig {
  rateLimits: VelocityLimits
  /** The service-wide cap per mailbox across tenants; null when switched off. */
  mailboxLimit: RateLimit | null
  /** Limits of the routes outside the OTP admission step: per key (account), per tenant (preview), per client (public). */
  routeLimits: { account: RateLimit, preview: RateLimit, public: RateLimit }
  lockout: LockoutPolicy
  ipv6BucketPrefix: number
}

export function limitsConfig (env: Env): LimitsConfig {
  const lockout: LockoutPolicy = {
    threshold: env.LOCKOUT_THRESHOLD,
    baseMs: durationMs(env, 'LOCKOUT_DURATION'),
    maxMs: durationMs(env, 'LOCKOUT_MAX_DURATION'),
    resetAfterMs: durationMs(env, 'LOCKOUT_RESET_AFTER')
  }
  if (lockout.maxMs < lockout.baseMs) throw new ConfigError('LOCKOUT_MAX_DURATION', `must be at least LOCKOUT_DURATION (${env.LOCKOUT_DURATION})`)
  return {
    rateLimits: {
      source: rateLimit('RATE_LIMIT_SOURCE', env.RATE_LIMIT_SOURCE),
      backend: rateLimit('RATE_LIMIT_BACKEND', env.RATE_LIMIT_BACKEND),
      recipient: rateLimit('RATE_LIMIT_RECIPIENT', env.RATE_LIMIT_RECIPIENT),
      key: rateLimit('RATE_LIMIT_KEY', env.RATE_LIMIT_KEY)
    },
    mailboxLimit: env.RATE_LIMIT_MAILBOX === 'off' ? null : rateLimit('RATE_LIMIT_MAILBOX', env.RATE_LIMIT_MAILBOX),
    routeLimits: {
      account: rateLimit('RATE_LIMIT_ACCOUNT', env.RATE_LIMIT_ACCOUNT),
      preview: rateLimit('RATE_LIMIT_PREVIEW', env.RATE_LIMIT_PREVIEW),
      public: rateLimit('RATE_LIMIT_PUBLIC', env.RATE_LIMIT_PUBLIC)
    },
    lockout,
    ipv6BucketPrefix: env.IPV6_BUCKET_PREFIX
  }
}
