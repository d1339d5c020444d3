import fp from 'fastify-plugin'
import { apiError } from '../lib/errors.js'
import { bearerToken, type KeyKind } from '../lib/keys.js'
import type { TenantKey } from '../lib/tenants.js'

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

/**
 * Authenticates every route of the scope it is registered in. It runs at preValidation,
 * after the body was read, so that an oversized body answers 413 even without a key; it
 * still runs before schema validation and before any store is touched.
 */
export default fp(async function authPlugin (fastify) {
  fastify.decorateRequest('auth', null)
  fastify.addHook('preValidation', async function authenticate (request) {
    const presented = bearerToken(request.headers.authorization)
    const key = presented === null ? null : fastify.tenants.current.authenticate(presented, Date.now())
    if (key === null) throw apiError('UNAUTHORIZED', undefined, unauthorized)

    const origin = request.headers.origin
    if (key.allowsOrigin === null) {
      // A browser always sends Origin on cross-origin POSTs: a secret key seen with one has
      // leaked into a page.
      if (origin !== undefined) throw apiError('SECRET_KEY_IN_BROWSER')
    } else if (origin === undefined || !key.allowsOrigin(origin)) {
      throw apiError('ORIGIN_NOT_ALLOWED')
    }

    const allowedKinds = request.routeOptions.config.keyKinds
    if (allowedKinds !== undefined && !allowedKinds.includes(key.kind)) throw apiError('KEY_NOT_PERMITTED')
    request.auth = key
  })
}, { name: 'auth', dependencies: ['tenants'], fastify: '5.x' })
