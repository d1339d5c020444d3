import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../lib/config/types.js'
import { apiError } from '../lib/errors.js'
import { fromTrustedProxy, gatewayClient } from '../lib/net/client-address.js'
import type { IpRangeSet } from '../lib/net/ip-ranges.js'
import { workloadIdentity, workloadMatcher, type MeshIdentityHeader } from '../lib/net/workload-identity.js'
import { forwardedForOf, trustedProxies } from './client-address.js'

/** Where a request keeps its mesh caller once read (meshCallerOf). */
const meshCallerKey: unique symbol = Symbol('meshCaller')

declare module 'fastify' {
  interface FastifyRequest {
    [meshCallerKey]: MeshCaller | null
    /**
     * The caller's workload identity (a SPIFFE ID, a Linkerd identity) as the mesh's sidecar
     * verified it, or null: no MESH_IDENTITY_HEADER, a peer that is not a trusted proxy, or a
     * caller outside the mesh. For a gateway's request, the gateway's: keys bound to
     * `workloads` are checked against it.
     */
    workload: string | null
    /**
     * The workload per-source limits count this request under: `workload`, or null when there
     * is none or it is a gateway's (MESH_GATEWAY_IDENTITIES), whose requests speak for the end
     * clients it forwards and are counted by `clientAddress`, theirs.
     */
    sourceWorkload: string | null
  }
}

/** How callers in the mesh are told apart: MESH_IDENTITY_HEADER from TRUST_PROXY peers, and the gateways among them. */
export interface MeshSettings {
  header: MeshIdentityHeader
  proxies: IpRangeSet
  isGateway: (identity: string) => boolean
  gatewayHops: number
}

/** What a request's mesh headers say; a refusal when they cannot be read. */
export type MeshCaller =
  | { ok: true, workload: string | null, endClient: string | null }
  | { ok: false, code: 'INVALID_WORKLOAD_IDENTITY' | 'INVALID_FORWARDED_FOR', problem: string }

const OUTSIDE_THE_MESH: MeshCaller = { ok: true, workload: null, endClient: null }

/** The mesh settings of a configuration; null when no identity is read. */
export function meshSettings (config: Pick<Config, 'meshIdentityHeader' | 'trustProxy' | 'meshGateways'>): MeshSettings | null {
  const proxies = trustedProxies(config.trustProxy)
  if (config.meshIdentityHeader === null || proxies === null) return null
  const gateways = config.meshGateways
  return {
    header: config.meshIdentityHeader,
    proxies,
    isGateway: gateways === null ? () => false : workloadMatcher(gateways.identities),
    gatewayHops: gateways?.trustedHops ?? 0
  }
}

/**
 * Who a request comes from in the mesh: the identity its sidecar verified, and for a gateway
 * the end client it forwarded (lib/net/client-address.ts gatewayClient). A request from a peer
 * that is not a trusted proxy carries whatever its sender wrote, and is outside the mesh.
 *
 * Read once per request and kept on it: the log serializer of the request's first line runs
 * before the onRequest hook and asks too, and parsing an XFCC header costs several microseconds.
 */
export function meshCallerOf (request: Pick<FastifyRequest, 'socket' | 'headers' | typeof meshCallerKey>, mesh: MeshSettings): MeshCaller {
  const value = request.headers[mesh.header]
  if (value === undefined || !fromTrustedProxy(request.socket?.remoteAddress, mesh.proxies)) return OUTSIDE_THE_MESH
  request[meshCallerKey] ??= callerFrom(request, value, mesh)
  return request[meshCallerKey]
}

function callerFrom (request: Pick<FastifyRequest, 'headers'>, value: string | string[], mesh: MeshSettings): MeshCaller {
  const found = workloadIdentity(mesh.header, value)
  if (found === null) return OUTSIDE_THE_MESH
  if (!found.ok) return { ok: false, code: 'INVALID_WORKLOAD_IDENTITY', problem: found.problem }
  if (!mesh.isGateway(found.identity)) return { ok: true, workload: found.identity, endClient: null }
  const endClient = gatewayClient(forwardedForOf(request), mesh.gatewayHops)
  return endClient === null
    ? { ok: false, code: 'INVALID_FORWARDED_FOR', problem: `X-Forwarded-For from the gateway ${found.identity} has no address ${mesh.gatewayHops} entries left of its right-most one (MESH_GATEWAY_TRUSTED_HOPS)` }
    : { ok: true, workload: found.identity, endClient }
}

/**
 * Reads MESH_IDENTITY_HEADER on connections from a TRUST_PROXY peer, the sidecar that ended
 * the caller's mTLS; from any other peer the header is whatever the caller wrote and is
 * ignored. A malformed value from the sidecar answers 400 INVALID_WORKLOAD_IDENTITY: a
 * request that should carry an identity is not served as if it carried none. A gateway's
 * request (MESH_GATEWAY_IDENTITIES) speaks for the end client it forwarded: that client
 * becomes the request's client address, and one without it answers 400
 * INVALID_FORWARDED_FOR, before anything is counted.
 */
export default fp(async function workloadIdentityPlugin (fastify) {
  fastify.decorateRequest('workload', null)
  fastify.decorateRequest('sourceWorkload', null)
  fastify.decorateRequest(meshCallerKey, null)
  const mesh = meshSettings(fastify.config)
  if (mesh === null) return
  fastify.addHook('onRequest', (request, _reply, done) => {
    const caller = meshCallerOf(request, mesh)
    if (!caller.ok) {
      request.log.info({ problem: caller.problem }, caller.code === 'INVALID_WORKLOAD_IDENTITY' ? 'malformed workload identity' : 'gateway request without its end client')
      done(apiError(caller.code))
      return
    }
    request.workload = caller.workload
    if (caller.endClient === null) request.sourceWorkload = caller.workload
    else request.clientAddress = caller.endClient
    done()
  })
}, { name: 'workload-identity', dependencies: ['config', 'client-address'], fastify: '5.x' })
