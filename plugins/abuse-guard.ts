import fp from 'fastify-plugin'
import { apiError } from '../lib/errors.js'
import { normalizeAddress } from '../lib/net/source-address.js'
import { END_USER_IP } from './client-address.js'

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The end user a backend calls for (End-User-IP, secret keys only), in canonical form; null
     * when the request speaks for its client itself. Set once the key is known.
     */
    endUserAddress: string | null
  }
}

/**
 * Network block lists in the API scope, cheapest first: the global lists (Tor exits, proxy
 * and hosting ranges) before the key is even looked at, so a blocked flood costs no store
 * round trip; the tenant's own `blockedNetworks` once the key is known. A backend that sends
 * End-User-IP with a secret key has the lists applied to its end user instead of to itself
 * (partner backends commonly run in hosting ranges): that check waits for the key.
 * Recipient policy is lib/recipients; velocity, lockout and quota are the admission step.
 */
export default fp(async function abuseGuardPlugin (fastify) {
  const { blocklists } = fastify
  const listed = (address: string): boolean => blocklists.match(address) !== null
  fastify.decorateRequest('endUserAddress', null)

  if (blocklists.status().length > 0) {
    fastify.addHook('onRequest', (request, _reply, done) => {
      // Serving without a block list the operator configured would let its sources through.
      if (!blocklists.loaded()) {
        done(apiError('UNAVAILABLE', 'A network block list has not loaded yet; retry later', { 'retry-after': '5' }))
        return
      }
      if (request.headers[END_USER_IP] !== undefined) {
        done()
        return
      }
      done(listed(request.clientAddress) ? apiError('SOURCE_BLOCKED') : undefined)
    })
  }

  fastify.addHook('preHandler', (request, _reply, done) => {
    const key = request.auth
    if (key === null) {
      done()
      return
    }
    const forwarded = request.headers[END_USER_IP]
    if (forwarded !== undefined) {
      if (key.kind !== 'secret') {
        done(apiError('END_USER_IP_NOT_ALLOWED'))
        return
      }
      // The parsing of a socket's address; repeated headers were refused as ambiguous.
      const endUser = typeof forwarded === 'string' ? normalizeAddress(forwarded.trim()) : null
      if (endUser === null) {
        done(apiError('INVALID_END_USER_IP'))
        return
      }
      if (listed(endUser)) {
        done(apiError('SOURCE_BLOCKED'))
        return
      }
      request.endUserAddress = endUser
    } else if (key.kind === 'secret' && key.tenant.requireEndUserIp) {
      done(apiError('END_USER_IP_REQUIRED'))
      return
    }
    const networks = key.tenant.blockedNetworks
    done(networks !== null && networks.has(request.endUserAddress ?? request.clientAddress) ? apiError('SOURCE_BLOCKED') : undefined)
  })
}, { name: 'abuse-guard', dependencies: ['config', 'services', 'client-address'], fastify: '5.x' })
