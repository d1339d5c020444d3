import fp from 'fastify-plugin'
import { apiError, type ApiError } from '../lib/errors.js'
import { headerCount } from '../lib/net/http-headers.js'
import { bearerToken, type KeyKind } from '../lib/keys/api-keys.js'
import type { TenantKey } from '../lib/tenants/tenant.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated key (and through it the tenant); set by the auth hook. */
    auth: TenantKey | null
  }
  interface FastifyContextConfig {
    /** Key kinds that may call the route; all kinds when absent. */
    keyKinds?: readonly KeyKind[]
  }
}

const unauthorized = { 'www-authenticate': 'Bearer realm="email-otp"' }

function originRefusal (key: TenantKey, origin: string | undefined): ApiError | null {
  if (key.allowsOrigin === null) {
    // A browser always sends Origin on cross-origin POSTs: a secret key seen with one has
    // leaked into a page.
    return origin === undefined ? null : apiError('SECRET_KEY_IN_BROWSER')
  }
  return origin !== undefined && key.allowsOrigin(origin) ? null : apiError('ORIGIN_NOT_ALLOWED')
}

/**
 * Authenticates every route of the scope it is registered in. It runs at preValidation,
 * after the body was read, so that an oversized body answers 413 even without a key; it
 * still runs before schema validation and before any store is touched.
 */
export default fp(async function authPlugin (fastify) {
  fastify.decorateRequest('auth', null)
  // Synchronous, as it is on every request: an async hook costs a promise and a microtask.
  fastify.addHook('preValidation', function authenticate (request, _reply, done) {
    // Two Authorization headers name two callers: node reads the first, a proxy in front may
    // have read the last. Neither is taken; the answer is every 401's.
    const presented = headerCount(request.raw.rawHeaders, 'authorization') > 1 ? null : bearerToken(request.headers.authorization)
    const key = presented === null ? null : fastify.tenants.current.identify(presented, Date.now())
    if (key === null) {
      done(apiError('UNAUTHORIZED', undefined, unauthorized))
      return
    }
    // A valid key of a tenant the tenants file gets wrong: its caller learns why, not a 401.
    // Fixing a tenants file takes an operator minutes, not a client's retry loop.
    if ('refused' in key) {
      done(apiError('TENANT_MISCONFIGURED', undefined, { 'retry-after': '60' }))
      return
    }
    const refusal = originRefusal(key, request.headers.origin) ??
      (key.allowsWorkload !== null && (request.workload === null || !key.allowsWorkload(request.workload)) ? apiError('WORKLOAD_NOT_ALLOWED') : null) ??
      (request.routeOptions.config.keyKinds?.includes(key.kind) === false ? apiError('KEY_NOT_PERMITTED') : null)
    if (refusal === null) request.auth = key
    done(refusal ?? undefined)
  })
}, { name: 'auth', dependencies: ['services', 'workload-identity'], fastify: '5.x' })
