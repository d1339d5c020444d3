import fp from 'fastify-plugin'
import type { FastifyRequest } from 'fastify'
import { apiError } from '../lib/errors.js'
import { clientAddress, fromTrustedProxy } from '../lib/net/client-address.js'
import { repeatedHeader } from '../lib/net/http-headers.js'
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
  // Repeated lines are refused by the hook below; the log serializer that asks before it
  // reads them as node joins them.
  return Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor
}

/** The client address of a request, for callers that run before the onRequest hook (log serializers). */
export function clientAddressOf (request: Pick<FastifyRequest, 'socket' | 'headers'>, proxies: IpRangeSet | null): string | null {
  return clientAddress(request.socket?.remoteAddress, forwardedForOf(request), proxies)
}

function mayBeRepeated (value: string | string[] | undefined): boolean {
  return value !== undefined && (Array.isArray(value) || value.includes(','))
}

/** The header a backend names its end user with (as Auth0's `auth0-forwarded-for`), read from any peer. */
export const END_USER_IP = 'end-user-ip'

/**
 * Resolves the client address once per request, first thing. Refused before anything else
 * runs, as it has no one caller to check or to count: a request whose X-Forwarded-For (from a
 * trusted proxy) names no address (400 INVALID_FORWARDED_FOR), and one that carries a header
 * naming its caller on two lines (400 AMBIGUOUS_HEADER): End-User-IP from any peer, and from a
 * trusted proxy X-Forwarded-For and the mesh identity header, the headers read from it.
 */
export default fp(async function clientAddressPlugin (fastify) {
  const { trustProxy, meshIdentityHeader } = fastify.config
  const proxies = trustedProxies(trustProxy)
  const fromAnyPeer = [END_USER_IP]
  const fromProxies = [END_USER_IP, 'x-forwarded-for', ...(meshIdentityHeader === null ? [] : [meshIdentityHeader])]
  fastify.decorateRequest('clientAddress', '')
  fastify.addHook('onRequest', (request, _reply, done) => {
    const read = fromTrustedProxy(request.socket?.remoteAddress, proxies) ? fromProxies : fromAnyPeer
    // node joins these headers' lines with ", ": a value without a comma came on one line, and
    // most requests need no look at the raw headers.
    const repeated = read.some((name) => mayBeRepeated(request.headers[name])) ? repeatedHeader(request.raw.rawHeaders, read) : null
    if (repeated !== null) {
      done(apiError('AMBIGUOUS_HEADER', `${repeated} appears more than once`))
      return
    }
    const address = clientAddressOf(request, proxies)
    if (address === null) {
      done(apiError('INVALID_FORWARDED_FOR'))
      return
    }
    request.clientAddress = address
    done()
  })
}, { name: 'client-address', dependencies: ['config'], fastify: '5.x' })
