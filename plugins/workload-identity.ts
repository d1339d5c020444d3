import fp from 'fastify-plugin'
import { apiError } from '../lib/errors.js'
import { fromTrustedProxy } from '../lib/net/client-address.js'
import { workloadIdentity } from '../lib/net/workload-identity.js'
import { trustedProxies } from './client-address.js'

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The caller's workload identity (a SPIFFE ID, a Linkerd identity) as the mesh's sidecar
     * verified it, or null: no MESH_IDENTITY_HEADER, a peer that is not a trusted proxy, or a
     * caller outside the mesh.
     */
    workload: string | null
  }
}

/**
 * Reads MESH_IDENTITY_HEADER on connections from a TRUST_PROXY peer, the sidecar that ended
 * the caller's mTLS; from any other peer the header is whatever the caller wrote and is
 * ignored. A malformed value from the sidecar answers 400 INVALID_WORKLOAD_IDENTITY: a
 * request that should carry an identity is not served as if it carried none.
 */
export default fp(async function workloadIdentityPlugin (fastify) {
  const header = fastify.config.meshIdentityHeader
  fastify.decorateRequest('workload', null)
  const proxies = trustedProxies(fastify.config.trustProxy)
  if (header === null || proxies === null) return
  fastify.addHook('onRequest', (request, _reply, done) => {
    if (!fromTrustedProxy(request.socket.remoteAddress, proxies)) {
      done()
      return
    }
    const found = workloadIdentity(header, request.headers[header])
    if (found === null) {
      done()
      return
    }
    if (!found.ok) {
      request.log.info({ problem: found.problem }, 'malformed workload identity')
      done(apiError('INVALID_WORKLOAD_IDENTITY'))
      return
    }
    request.workload = found.identity
    done()
  })
}, { name: 'workload-identity', dependencies: ['config', 'client-address'], fastify: '5.x' })
