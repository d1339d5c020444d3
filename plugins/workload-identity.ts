import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../lib/config/types.js'
import { Counter } from 'prom-client'
import { apiError } from '../lib/errors.js'
import { fromTrustedProxy, gatewayClient, peerAddress } from '../lib/net/client-address.js'
import type { IpRangeSet } from '../lib/net/ip-ranges.js'
import { UNIDENTIFIED_MESH_SOURCE, workloadBucket, workloadIdentity, workloadMatcher, type MeshIdentityHeader } from '../lib/net/workload-identity.js'
import { forwardedForOf, trustedProxies } from './client-address.js'

/** Where a request keeps its mesh caller once read (meshCallerOf). */
const meshCallerKey: unique symbol = Symbol('meshCaller')

declare module 'fastify' {
  interface FastifyRequest {
    [meshCallerKey]: MeshCaller | null
    /**
     * The caller's workload identity (a SPIFFE ID, a Linkerd identity) as the mesh's sidecar
     * verified it, or null: no MESH_IDENTITY_HEADER, a peer that is not a trusted proxy, or a
     * caller without an identity. For a gateway's request, the gateway's: keys bound to
     * `workloads` are checked against it.
     */
    workload: string | null
    /**
     * The per-source bucket of a caller in the mesh that is not counted by its address: an
     * internal workload's (workloadBucket), or UNIDENTIFIED_MESH_SOURCE, the one bucket of every
     * caller that reaches the service through the sidecar without an identity. Null for a
     * gateway's end clients and for requests from outside the mesh, counted by `clientAddress`.
     */
    meshSource: string | null
  }
}

/** How callers in the mesh are told apart: MESH_IDENTITY_HEADER from TRUST_PROXY peers, and the gateways among them. */
export interface MeshSettings {
  header: MeshIdentityHeader
  proxies: IpRangeSet
  isGateway: (identity: string) => boolean
  gatewayHops: number
}

/**
 * What a request's mesh headers say: a caller from outside the mesh (its peer is not a trusted
 * proxy), one that came through the sidecar without an identity, an internal workload, a
 * gateway's end client; or a refusal when they cannot be read.
 */
export type MeshCaller =
  | { ok: true, kind: 'outside' | 'unidentified', workload: null, endClient: null }
  | { ok: true, kind: 'workload', workload: string, endClient: null }
  | { ok: true, kind: 'gateway', workload: string, endClient: string }
  | { ok: false, code: 'INVALID_WORKLOAD_IDENTITY' | 'INVALID_FORWARDED_FOR', problem: string }

const OUTSIDE_THE_MESH: MeshCaller = { ok: true, kind: 'outside', workload: null, endClient: null }
const UNIDENTIFIED: MeshCaller = { ok: true, kind: 'unidentified', workload: null, endClient: null }

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
 * that is not a trusted proxy carries whatever its sender wrote, and is outside the mesh. One
 * from the sidecar without the identity header is unidentified: a plaintext caller (Istio's
 * PERMISSIVE mode, a pod without a sidecar) or a probe, whose X-Forwarded-For is its own word.
 *
 * Read once per request and kept on it: the log serializer of the request's first line runs
 * before the onRequest hook and asks too, and parsing an XFCC header costs several microseconds.
 */
export function meshCallerOf (request: Pick<FastifyRequest, 'socket' | 'headers' | typeof meshCallerKey>, mesh: MeshSettings): MeshCaller {
  if (!fromTrustedProxy(request.socket?.remoteAddress, mesh.proxies)) return OUTSIDE_THE_MESH
  const value = request.headers[mesh.header]
  if (value === undefined) return UNIDENTIFIED
  request[meshCallerKey] ??= callerFrom(request, value, mesh)
  return request[meshCallerKey]
}

/** How the request line of a log names a caller in the mesh. */
export interface MeshLogFields {
  /** The source the per-source limits count: a gateway's end client, a workload's bucket, or UNIDENTIFIED_MESH_SOURCE. */
  remoteAddress: string
  /** The identity the sidecar verified: an internal workload's, or the gateway's that forwarded the end client. */
  workload?: string
}

/**
 * What a request's log lines say of a caller in the mesh, as the onRequest hook below will
 * count it; null for a caller from outside the mesh (its address is its own) and for a header
 * that is refused. An internal workload is named by its identity and its bucket, never by the
 * X-Forwarded-For it wrote: a workload chooses that address, and an incident response would
 * blame whoever it named.
 */
export function meshLogFields (request: Pick<FastifyRequest, 'socket' | 'headers' | typeof meshCallerKey>, mesh: MeshSettings): MeshLogFields | null {
  const caller = meshCallerOf(request, mesh)
  if (!caller.ok) return null
  switch (caller.kind) {
    case 'outside': return null
    case 'unidentified': return { remoteAddress: UNIDENTIFIED_MESH_SOURCE }
    case 'workload': return { remoteAddress: workloadBucket(caller.workload), workload: caller.workload }
    case 'gateway': return { remoteAddress: caller.endClient, workload: caller.workload }
  }
}

function callerFrom (request: Pick<FastifyRequest, 'headers'>, value: string | string[], mesh: MeshSettings): MeshCaller {
  const found = workloadIdentity(mesh.header, value)
  if (found === null) return UNIDENTIFIED
  if (!found.ok) return { ok: false, code: 'INVALID_WORKLOAD_IDENTITY', problem: found.problem }
  if (!mesh.isGateway(found.identity)) return { ok: true, kind: 'workload', workload: found.identity, endClient: null }
  const endClient = gatewayClient(forwardedForOf(request), mesh.gatewayHops)
  return endClient === null
    ? { ok: false, code: 'INVALID_FORWARDED_FOR', problem: `X-Forwarded-For from the gateway ${found.identity} has no address ${mesh.gatewayHops} entries left of its right-most one (MESH_GATEWAY_TRUSTED_HOPS)` }
    : { ok: true, kind: 'gateway', workload: found.identity, endClient }
}

/**
 * Reads MESH_IDENTITY_HEADER on connections from a TRUST_PROXY peer, the sidecar that ended
 * the caller's mTLS; from any other peer the header is whatever the caller wrote and is
 * ignored. A malformed value from the sidecar answers 400 INVALID_WORKLOAD_IDENTITY: a
 * request that should carry an identity is not served as if it carried none. A gateway's
 * request (MESH_GATEWAY_IDENTITIES) speaks for the end client it forwarded: that client
 * becomes the request's client address, and one without it answers 400
 * INVALID_FORWARDED_FOR, before anything is counted. A request through the sidecar without an
 * identity is one source with every other such request: its X-Forwarded-For is not read (any
 * caller could mint a bucket per request by writing it), its client address is the sidecar's,
 * its bucket UNIDENTIFIED_MESH_SOURCE, and email_otp_mesh_unidentified_requests_total counts it.
 */
export default fp(async function workloadIdentityPlugin (fastify) {
  fastify.decorateRequest('workload', null)
  fastify.decorateRequest('meshSource', null)
  fastify.decorateRequest(meshCallerKey, null)
  const mesh = meshSettings(fastify.config)
  if (mesh === null) return
  const unidentified = new Counter({
    name: 'email_otp_mesh_unidentified_requests_total',
    help: 'Requests through the mesh sidecar without a workload identity (MESH_IDENTITY_HEADER): all counted as one source, mesh:unidentified.',
    registers: [fastify.metrics.registry]
  })
  fastify.addHook('onRequest', (request, _reply, done) => {
    const caller = meshCallerOf(request, mesh)
    if (!caller.ok) {
      request.log.info({ problem: caller.problem }, caller.code === 'INVALID_WORKLOAD_IDENTITY' ? 'malformed workload identity' : 'gateway request without its end client')
      done(apiError(caller.code))
      return
    }
    request.workload = caller.workload
    if (caller.kind === 'workload') {
      request.meshSource = workloadBucket(caller.workload)
    } else if (caller.kind === 'gateway') {
      request.clientAddress = caller.endClient
    } else if (caller.kind === 'unidentified') {
      unidentified.inc()
      request.meshSource = UNIDENTIFIED_MESH_SOURCE
      request.clientAddress = peerAddress(request.socket?.remoteAddress) ?? request.clientAddress
    }
    done()
  })
}, { name: 'workload-identity', dependencies: ['config', 'client-address', 'metrics'], fastify: '5.x' })
