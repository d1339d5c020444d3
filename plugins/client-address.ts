import fp from 'fastify-plugin'
import type { FastifyRequest } from 'fastify'
import { apiError } from '../lib/errors.js'
import { clientAddress } from '../lib/net/client-address.js'
import { IpRangeSet } from '../lib/net/ip-ranges.js'

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The client this request speaks for, in canonical form (see lib/net/client-address):
     * what block lists, per-source buckets, the refusal pace and logs use. Set by the first
     * onRequest hook; for a mesh gateway's request (MESH_GATEWAY_IDENTITIES), replaced by the
     * end client it forwarded in the next (plugins/workload-identity.ts). `request.ip` stays
     * the socket's peer.
     */
    clientAddress: string
  }
}

/** The proxies whose X-Forwarded-For is read (TRUST_PROXY); null when none is trusted. */
export function trustedProxies (cidrs: readonly string[]): IpRangeSet | null {
  return cidrs.length === 0 ? null : IpRangeSet.fromEntries(cidrs).set
}

/** A request's X-Forwarded-For as one list. */
export function forwardedForOf (request: Pick<FastifyRequest, 'headers'>): string | undefined {
  const forwardedFor = request.headers['x-forwarded-for']
  // node joins repeated X-Forwarded-For headers into one list, as proxies expect.
  return Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor
}

/** The client address of a request, for callers that run before the onRequest hook (log serializers). */
export function clientAddressOf (request: Pick<FastifyRequest, 'socket' | 'headers'>, proxies: IpRangeSet | null): string | null {
  return clientAddress(request.socket?.remoteAddress, forwardedForOf(request), proxies)
}

/**
 * Resolves the client address once per request, first thing. A request whose
 * X-Forwarded-For (from a trusted proxy) names no address is refused with 400
 * INVALID_FORWARDED_FOR before anything else runs: it has no address to check or to count.
 */
export default fp(async function clientAddressPlugin (fastify) {
  const proxies = trustedProxies(fastify.config.trustProxy)
  fastify.decorateRequest('clientAddress', '')
  fastify.addHook('onRequest', (request, _reply, done) => {
    const address = clientAddressOf(request, proxies)
    if (address === null) {
      done(apiError('INVALID_FORWARDED_FOR'))
      return
    }
    request.clientAddress = address
    done()
  })
}, { name: 'client-address', dependencies: ['config'], fastify: '5.x' })
