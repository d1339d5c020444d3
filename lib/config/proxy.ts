import type { Env } from '../../schemas/env.js'
import { gatewayIdentityProblem, type MeshGateways, type MeshIdentityHeader } from '../net/workload-identity.js'
import { parseCidrList } from './env.js'
import { ConfigError } from './error.js'

/** Who stands in front of the service: the proxies whose X-Forwarded-For is trusted, and a mesh sidecar's identity header. */
export interface ProxyConfig {
  trustProxy: string[]
  /** Where a trusted sidecar passes the caller's workload identity; null: not read. */
  meshIdentityHeader: MeshIdentityHeader | null
  /** The identities whose requests are counted per forwarded end client; null: `none`, or no mesh identity read. */
  meshGateways: MeshGateways | null
}

export function proxyConfig (env: Env): ProxyConfig {
  const trustProxy = parseCidrList('TRUST_PROXY', env.TRUST_PROXY)
  if (env.MESH_IDENTITY_HEADER !== undefined && trustProxy.length === 0) {
    throw new ConfigError('MESH_IDENTITY_HEADER', 'needs TRUST_PROXY: the identity is read only from the address the sidecar connects from (127.0.0.6 behind Istio)')
  }
  return { trustProxy, meshIdentityHeader: env.MESH_IDENTITY_HEADER ?? null, meshGateways: meshGatewaysOf(env) }
}

/**
 * MESH_GATEWAY_IDENTITIES and MESH_GATEWAY_TRUSTED_HOPS. Required with a mesh identity, `none`
 * included: left unset, an ingress gateway would be counted as one workload, every end user
 * behind it in one bucket, and nothing would say so until its users were refused.
 */
function meshGatewaysOf (env: Env): MeshGateways | null {
  const named = env.MESH_GATEWAY_IDENTITIES
  if (env.MESH_IDENTITY_HEADER === undefined) {
    if (named !== undefined) throw new ConfigError('MESH_GATEWAY_IDENTITIES', 'is only used with MESH_IDENTITY_HEADER')
  } else if (named === undefined) {
    throw new ConfigError('MESH_GATEWAY_IDENTITIES', 'is required with MESH_IDENTITY_HEADER: the identities of the gateways that forward end users\' requests (each end user is then counted, not the gateway), or none when only internal workloads call the service')
  }
  const identities = (named ?? 'none').split(',').map((entry) => entry.trim()).filter((entry) => entry !== '')
  if (identities.length === 0) throw new ConfigError('MESH_GATEWAY_IDENTITIES', 'names no identity (none: no gateway forwards to the service)')
  if (identities.length === 1 && identities[0] === 'none') {
    if (env.MESH_GATEWAY_TRUSTED_HOPS !== 0) throw new ConfigError('MESH_GATEWAY_TRUSTED_HOPS', 'is only used with MESH_GATEWAY_IDENTITIES (the proxies in front of a gateway)')
    return null
  }
  for (const identity of identities) {
    if (identity === 'none') throw new ConfigError('MESH_GATEWAY_IDENTITIES', 'lists none beside identities: none stands alone')
    const problem = gatewayIdentityProblem(env.MESH_IDENTITY_HEADER ?? 'x-forwarded-client-cert', identity)
    if (problem !== null) throw new ConfigError('MESH_GATEWAY_IDENTITIES', `has an entry ${JSON.stringify(identity.slice(0, 200))} that ${problem}`)
  }
  return { identities, trustedHops: env.MESH_GATEWAY_TRUSTED_HOPS }
}
