import fp from 'fastify-plugin'
import rateLimit from '@fastify/rate-limit'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { apiError } from '../lib/errors.js'
import { MemoryGuessCounter, RedisGuessCounter, type GuessCounter } from '../lib/lockout.js'
import { normalizeAddress, sourceBucket } from '../lib/net/source-address.js'
import type { RateLimit, VelocityLimits } from '../lib/rate-limits.js'
import { storeCall } from '../lib/store-errors.js'
import type { TenantKey } from '../lib/tenants.js'

type Limiter = keyof VelocityLimits
type LimiterCheck = ReturnType<FastifyInstance['createRateLimit']>

export interface AbuseGuard {
  /** 403 when the tenant refuses the recipient's domain (its deny list, disposable domains). */
  checkRecipient (key: TenantKey, domain: string): void
  /** Velocity on dispatch: the recipient's lockout, then recipient, source and key limits. */
  checkDispatch (request: FastifyRequest, reply: FastifyReply, recipientTag: string): Promise<void>
  /** Velocity on verify: source and key limits. */
  checkVerify (request: FastifyRequest, reply: FastifyReply): Promise<void>
  /** Counts a wrong guess against its recipient, or clears the count after a right one. */
  recordGuess (key: TenantKey, recipientTag: string, verified: boolean): Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    abuseGuard: AbuseGuard
  }
  interface FastifyRequest {
    /** Rate-limit bucket names of this request, set just before the limiters run. */
    velocityBuckets: Partial<Record<Limiter, string>> | null
  }
}

function scope (key: TenantKey): string {
  // Sandbox traffic has buckets of its own, so partners' tests never eat live limits.
  return `${key.tenant.id}:${key.mode}`
}

/**
 * The abuse controls of the API scope, cheapest first: network block lists before the key
 * is even looked at (no store round trip for a blocked flood), the tenant's own network deny
 * list once the key is known, then recipient policy, lockout, velocity. Counters live in
 * Redis when configured, so every instance enforces the same limits. A store failure fails
 * closed: 503, never a pass.
 */
export default fp(async function abuseGuardPlugin (fastify) {
  const { config, blocklists } = fastify
  const redis = fastify.redis

  await fastify.register(rateLimit, {
    global: false,
    skipOnError: false,
    nameSpace: 'rl:',
    // The in-memory LRU forgets the least recently seen buckets past this size.
    cache: 100_000,
    ...(redis === null ? {} : { redis })
  })
  const limit = (request: FastifyRequest, name: Limiter): RateLimit => request.auth?.tenant.limits[name] ?? config.rateLimits[name]
  const limiters = Object.fromEntries((['recipient', 'source', 'key'] as const).map((name) => [name, fastify.createRateLimit({
    keyGenerator: (request) => request.velocityBuckets?.[name] ?? '',
    max: (request) => limit(request, name).max,
    timeWindow: (request) => limit(request, name).windowMs
  })])) as Record<Limiter, LimiterCheck>

  const guesses: GuessCounter = redis === null ? new MemoryGuessCounter() : new RedisGuessCounter(redis)
  if (guesses instanceof MemoryGuessCounter) fastify.addHook('onClose', async () => { guesses.close() })
  const lockoutKey = (key: TenantKey, recipientTag: string): string => `lockout:{${scope(key)}}:${recipientTag}`

  fastify.decorateRequest('velocityBuckets', null)

  if (blocklists.status().length > 0) {
    fastify.addHook('onRequest', (request, _reply, done) => {
      const source = normalizeAddress(request.ip)
      done(source !== null && blocklists.match(source) !== null ? apiError('SOURCE_BLOCKED') : undefined)
    })
  }

  fastify.addHook('preHandler', (request, _reply, done) => {
    const networks = request.auth?.tenant.blockedNetworks
    done(networks !== null && networks !== undefined && networks.has(request.ip) ? apiError('SOURCE_BLOCKED') : undefined)
  })

  async function enforce (request: FastifyRequest, reply: FastifyReply, names: Limiter[], lockout?: Promise<{ count: number, resetMs: number }>): Promise<void> {
    // Issued together, these reach Redis in one pipelined round trip.
    const [locked, results] = await storeCall('rate limiter', async () => await Promise.all([
      lockout,
      Promise.all(names.map(async (name) => await limiters[name](request)))
    ]))
    if (locked !== undefined && locked.count >= config.lockout.threshold) {
      const seconds = String(Math.max(1, Math.ceil(locked.resetMs / 1000)))
      throw apiError('RATE_LIMITED', `Too many wrong codes were entered for this address; retry in ${seconds} s`, { 'retry-after': seconds })
    }
    // The tightest limit speaks for the request in the RateLimit-* headers.
    let tightest: { max: number, remaining: number, ttlInSeconds: number } | null = null
    for (const [index, result] of results.entries()) {
      if (result.isAllowed) continue
      if (result.isExceeded) {
        const seconds = String(result.ttlInSeconds)
        throw apiError('RATE_LIMITED', `Too many requests for this ${names[index] ?? 'client'}; retry in ${seconds} s`, {
          'retry-after': seconds,
          'ratelimit-limit': String(result.max),
          'ratelimit-remaining': '0',
          'ratelimit-reset': seconds
        })
      }
      if (tightest === null || result.remaining < tightest.remaining) tightest = result
    }
    if (tightest !== null) {
      reply.headers({ 'ratelimit-limit': tightest.max, 'ratelimit-remaining': tightest.remaining, 'ratelimit-reset': tightest.ttlInSeconds })
    }
  }

  function sourceAndKeyBuckets (request: FastifyRequest, key: TenantKey): Partial<Record<Limiter, string>> {
    return {
      source: `s:${scope(key)}:${sourceBucket(request.ip, config.ipv6BucketPrefix) ?? request.ip}`,
      key: `k:${scope(key)}:${key.id}`
    }
  }

  const guard: AbuseGuard = {
    checkRecipient (key, domain) {
      const verdict = key.tenant.recipientPolicy.check(domain)
      if (verdict === 'disposable') throw apiError('RECIPIENT_BLOCKED', 'Codes cannot be sent to disposable email domains')
      if (verdict === 'denied') throw apiError('RECIPIENT_BLOCKED')
    },
    async checkDispatch (request, reply, recipientTag) {
      const key = request.auth
      if (key === null) throw apiError('UNAUTHORIZED')
      request.velocityBuckets = { recipient: `r:${scope(key)}:${recipientTag}`, ...sourceAndKeyBuckets(request, key) }
      await enforce(request, reply, ['recipient', 'source', 'key'], guesses.failures(lockoutKey(key, recipientTag)))
    },
    async checkVerify (request, reply) {
      const key = request.auth
      if (key === null) throw apiError('UNAUTHORIZED')
      request.velocityBuckets = sourceAndKeyBuckets(request, key)
      await enforce(request, reply, ['source', 'key'])
    },
    async recordGuess (key, recipientTag, verified) {
      const counterKey = lockoutKey(key, recipientTag)
      await (verified ? guesses.reset(counterKey) : guesses.recordFailure(counterKey, config.lockout.windowMs))
    }
  }
  fastify.decorate('abuseGuard', guard)
}, { name: 'abuse-guard', dependencies: ['config', 'redis', 'blocklists'], fastify: '5.x' })
