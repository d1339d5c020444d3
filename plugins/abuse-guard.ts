import fp from 'fastify-plugin'
import { apiError } from '../lib/errors.js'

/**
 * Network block lists in the API scope, cheapest first: the global lists (Tor exits, proxy
 * and hosting ranges) before the key is even looked at, so a blocked flood costs no store
 * round trip; the tenant's own `blockedNetworks` once the key is known. Recipient policy is
 * lib/recipients; velocity, lockout and quota are the admission step (lib/admission).
 */
export default fp(async function abuseGuardPlugin (fastify) {
  const { blocklists } = fastify

  if (blocklists.status().length > 0) {
    fastify.addHook('onRequest', (request, _reply, done) => {
      done(blocklists.match(request.clientAddress) !== null ? apiError('SOURCE_BLOCKED') : undefined)
    })
  }

  fastify.addHook('preHandler', (request, _reply, done) => {
    const networks = request.auth?.tenant.blockedNetworks
    done(networks !== null && networks !== undefined && networks.has(request.clientAddress) ? apiError('SOURCE_BLOCKED') : undefined)
  })
}, { name: 'abuse-guard', dependencies: ['config', 'blocklists', 'client-address'], fastify: '5.x' })
