import fp from 'fastify-plugin'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { LimitCount, LimitHit } from '../lib/admission/admission.js'
import { apiError } from '../lib/errors.js'
import { tenantScope } from '../lib/tenants/api-keys.js'
import { sourceBucket } from '../lib/net/source-address.js'
import type { VelocityLimits } from '../lib/admission/velocity.js'
import type { TenantKey } from '../lib/tenants/registry.js'

type Limiter = keyof VelocityLimits

export interface AbuseGuard {
  /** 403 when the tenant refuses the recipient's domain (its deny list, disposable domains). */
  checkRecipient (key: TenantKey, domain: string): void
  /** The velocity counters a dispatch counts against: recipient, source, key. */
  dispatchLimits (request: FastifyRequest, key: TenantKey, recipientTag: string): LimitHit[]
  /** The velocity counters a verify counts against: source, key. */
  verifyLimits (request: FastifyRequest, key: TenantKey): LimitHit[]
  /**
   * 429 with Retry-After when the recipient is locked out (`lockoutResetMs` not null) or a
   * limit is exceeded; otherwise the RateLimit-* headers of the tightest limit.
   */
  settle (reply: FastifyReply, limits: readonly LimitHit[], counts: readonly LimitCount[], lockoutResetMs: number | null): void
  /** The recipient's wrong-guess counter: its key, and the key's prefix for a scope. */
  lockoutKey (key: TenantKey, recipientTag: string): string
  lockoutKeyPrefix (key: TenantKey): string
}

declare module 'fastify' {
  interface FastifyInstance {
    abuseGuard: AbuseGuard
  }
}

/** The key's scope as a hash tag: its counters share a slot with its tokens (see tenantScope). */
function scope (key: TenantKey): string {
  return `{${tenantScope(key.tenant.id, key.mode)}}`
}

/** The namespace of velocity counters, as @fastify/rate-limit names them. */
const VELOCITY_PREFIX = 'rl:'

/**
 * The abuse controls of the API scope, cheapest first: network block lists before the key
 * is even looked at (no store round trip for a blocked flood), the tenant's own network deny
 * list once the key is known, then recipient policy. Lockout and velocity are counted by the
 * admission step (one round trip with the quota and the token); this plugin names their
 * counters and turns the counts into a 429 or headers. Counters live in Redis when
 * configured, so every instance enforces the same limits. A store failure fails closed: 503,
 * never a pass.
 */
export default fp(async function abuseGuardPlugin (fastify) {
  const { config, blocklists } = fastify

  if (blocklists.status().length > 0) {
    fastify.addHook('onRequest', (request, _reply, done) => {
      done(blocklists.match(request.clientAddress) !== null ? apiError('SOURCE_BLOCKED') : undefined)
    })
  }

  fastify.addHook('preHandler', (request, _reply, done) => {
    const networks = request.auth?.tenant.blockedNetworks
    done(networks !== null && networks !== undefined && networks.has(request.clientAddress) ? apiError('SOURCE_BLOCKED') : undefined)
  })

  const limitOf = (key: TenantKey, name: Limiter, bucket: string): LimitHit => {
    const { max, windowMs } = key.tenant.limits[name] ?? config.rateLimits[name]
    return { name, bucket: VELOCITY_PREFIX + bucket, max, windowMs }
  }
  const sourceAndKey = (request: FastifyRequest, key: TenantKey): LimitHit[] => [
    limitOf(key, 'source', `s:${scope(key)}:${sourceBucket(request.clientAddress, config.ipv6BucketPrefix) ?? request.clientAddress}`),
    limitOf(key, 'key', `k:${scope(key)}:${key.id}`)
  ]

  const guard: AbuseGuard = {
    checkRecipient (key, domain) {
      const verdict = key.tenant.recipientPolicy.check(domain)
      if (verdict === 'disposable') throw apiError('RECIPIENT_BLOCKED', 'Codes cannot be sent to disposable email domains')
      if (verdict === 'denied') throw apiError('RECIPIENT_BLOCKED')
    },
    dispatchLimits (request, key, recipientTag) {
      return [limitOf(key, 'recipient', `r:${scope(key)}:${recipientTag}`), ...sourceAndKey(request, key)]
    },
    verifyLimits (request, key) {
      return sourceAndKey(request, key)
    },
    settle (reply, limits, counts, lockoutResetMs) {
      if (lockoutResetMs !== null) {
        const seconds = String(Math.max(1, Math.ceil(lockoutResetMs / 1000)))
        throw apiError('RATE_LIMITED', `Too many wrong codes were entered for this address; retry in ${seconds} s`, { 'retry-after': seconds })
      }
      // The tightest limit speaks for the request in the RateLimit-* headers.
      let tightest: { max: number, remaining: number, seconds: number } | null = null
      for (const [index, limit] of limits.entries()) {
        const count = counts[index]
        if (count === undefined) continue
        // As @fastify/rate-limit reports them.
        const seconds = Math.ceil(count.ttlMs / 1000)
        if (count.current > limit.max) {
          throw apiError('RATE_LIMITED', `Too many requests for this ${limit.name}; retry in ${seconds} s`, {
            'retry-after': String(seconds),
            'ratelimit-limit': String(limit.max),
            'ratelimit-remaining': '0',
            'ratelimit-reset': String(seconds)
          })
        }
        const remaining = limit.max - count.current
        if (tightest === null || remaining < tightest.remaining) tightest = { max: limit.max, remaining, seconds }
      }
      if (tightest !== null) {
        reply.headers({ 'ratelimit-limit': tightest.max, 'ratelimit-remaining': tightest.remaining, 'ratelimit-reset': tightest.seconds })
      }
    },
    lockoutKey (key, recipientTag) {
      return guard.lockoutKeyPrefix(key) + recipientTag
    },
    lockoutKeyPrefix (key) {
      return `lockout:${scope(key)}:`
    }
  }
  fastify.decorate('abuseGuard', guard)
}, { name: 'abuse-guard', dependencies: ['config', 'blocklists', 'client-address'], fastify: '5.x' })
