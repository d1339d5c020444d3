import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import rateLimit, { type RateLimitOptions } from '@fastify/rate-limit'
import { apiError } from '../../lib/errors.js'

/**
 * @fastify/rate-limit, for the routes outside the OTP admission step: account routes (usage,
 * the sandbox inbox, unlocking a recipient) per API key, and public ones (documentation,
 * readiness, unknown paths) per client address. The OTP routes do not use it: their limits
 * are counted in the admission script, with the quota and the token, in one Redis round trip
 * (lib/admission), where the plugin would add one of its own.
 *
 * Its counters are in Redis when a topology is configured, so every instance shares them. They
 * protect the service's capacity, not a secret: when Redis cannot answer they let requests
 * through (skipOnError), and the routes that need Redis answer 503 by themselves.
 */
export default fp(async function rateLimitPlugin (fastify) {
  await fastify.register(rateLimit, {
    global: false,
    // Its Redis store with the service's connection when the stores are in Redis, its in-memory one otherwise.
    redis: fastify.state.routeLimits.redis ?? undefined,
    nameSpace: fastify.state.routeLimits.nameSpace,
    skipOnError: true,
    // RateLimit-* and Retry-After, as the OTP routes answer them.
    enableDraftSpec: true,
    keyGenerator: sourceKey,
    errorResponseBuilder: (_request, context) => apiError('RATE_LIMITED', `Too many requests; retry in ${Math.max(1, Math.ceil(context.ttl / 1000))} s`)
  })
}, { name: 'rate-limit', dependencies: ['config', 'services', 'client-address', 'workload-identity'], fastify: '5.x' })

/** Per-source counts: per workload behind a mesh sidecar (and one for callers without an identity), per client address otherwise (a gateway's end clients included). */
function sourceKey (request: FastifyRequest): string {
  return request.meshSource ?? request.clientAddress
}

/**
 * Keys one account route remembers in process: more than any tenants file holds, so that no
 * key's count is forgotten to make room for another's. Only authenticated keys reach these
 * counters, and each route has its own table, apart from the per-address tables of the public
 * routes that strangers can fill.
 */
const ACCOUNT_KEYS_PER_ROUTE = 100_000

/** A route's limit per API key (the route runs after authentication). */
export function perKey (limit: { max: number, windowMs: number }): RateLimitOptions {
  return {
    max: limit.max,
    timeWindow: limit.windowMs,
    cache: ACCOUNT_KEYS_PER_ROUTE,
    hook: 'preHandler',
    keyGenerator: (request: FastifyRequest) => request.auth === null ? sourceKey(request) : `${request.auth.tenant.id}:${request.auth.mode}:${request.auth.id}`
  }
}

/** A route's limit per client address. */
export function perSource (limit: { max: number, windowMs: number }): RateLimitOptions {
  return { max: limit.max, timeWindow: limit.windowMs }
}
