import { EnvSchema, type Env } from '../../schemas/env.js'
import type { RedisAccess, RedisNode, RedisTopology } from '../state/index.js'
import { defaultDurationMs, durationMs } from './env.js'
import { ConfigError } from './error.js'

/** Where state lives: Redis (its topology, the client's timeout and acknowledgements) or the embedded default. */
export interface StateConfig {
  redisUrl: string | null
  /** Null on the embedded (in-memory) default. */
  redis: RedisTopology | null
  redisCommandTimeoutMs: number
  /** Replicas that must acknowledge a dispatch's or verify's write, and how long to wait for them. */
  redisReplicaAcks: { count: number, timeoutMs: number }
  /** The embedded default's cap on live codes per tenant and mode. */
  memoryStoreMaxTokens: number
  /** VERIFICATION_LOG_DAYS and VERIFICATION_LOG_MAX_PER_TENANT. */
  verificationLog: { retentionMs: number, maxPerScope: number }
  /** INSIGHTS_DAYS: how long the funnel's buckets are kept after their end. */
  insights: { retentionMs: number }
}

const REDIS_TOPOLOGY_VARIABLES = ['REDIS_URL', 'REDIS_SENTINELS', 'REDIS_CLUSTER_NODES'] as const

/** The one Redis topology configured, and the variable that chose it; null for none. */
export function redisTopology (env: Env): { topology: RedisTopology, variable: string } | null {
  const [first, second] = REDIS_TOPOLOGY_VARIABLES.filter((name) => env[name] !== undefined)
  if (first !== undefined && second !== undefined) {
    throw new ConfigError(second, `cannot be combined with ${first}: set exactly one of ${REDIS_TOPOLOGY_VARIABLES.join(', ')}`)
  }
  if (env.REDIS_SENTINEL_NAME !== undefined && env.REDIS_SENTINELS === undefined) {
    throw new ConfigError('REDIS_SENTINEL_NAME', 'is only used with REDIS_SENTINELS')
  }
  const access: RedisAccess = { username: env.REDIS_USERNAME ?? null, password: env.REDIS_PASSWORD ?? null, tls: env.REDIS_TLS === 'true' }
  if (env.REDIS_SENTINELS === undefined && env.REDIS_CLUSTER_NODES === undefined) {
    // A URL names its own credentials and TLS (rediss://); two sources could disagree.
    for (const [name, set] of [['REDIS_USERNAME', access.username !== null], ['REDIS_PASSWORD', access.password !== null], ['REDIS_TLS', access.tls]] as const) {
      if (set) throw new ConfigError(name, 'is only used with REDIS_SENTINELS or REDIS_CLUSTER_NODES (REDIS_URL carries its own credentials and rediss://)')
    }
  }
  if (access.username !== null && access.password === null) {
    throw new ConfigError('REDIS_PASSWORD', 'is required when REDIS_USERNAME is set')
  }
  if (env.REDIS_URL !== undefined) return { variable: 'REDIS_URL', topology: { kind: 'single', url: env.REDIS_URL } }
  if (env.REDIS_SENTINELS !== undefined) {
    if (env.REDIS_SENTINEL_NAME === undefined) throw new ConfigError('REDIS_SENTINEL_NAME', 'is required when REDIS_SENTINELS is set')
    const sentinels = parseRedisNodes('REDIS_SENTINELS', env.REDIS_SENTINELS)
    return { variable: 'REDIS_SENTINELS', topology: { kind: 'sentinel', sentinels, name: env.REDIS_SENTINEL_NAME, ...access } }
  }
  if (env.REDIS_CLUSTER_NODES !== undefined) {
    return { variable: 'REDIS_CLUSTER_NODES', topology: { kind: 'cluster', nodes: parseRedisNodes('REDIS_CLUSTER_NODES', env.REDIS_CLUSTER_NODES), ...access } }
  }
  return null
}

/**
 * Where state lives: Redis (its topology, the client's timeout and acknowledgements) or the
 * embedded default (its cap on live codes). `redisVariable` is the variable that chose a
 * topology, null for the embedded default. Each setting is refused where it would do nothing:
 * a setting without effect would let an operator count on a guarantee the service does not
 * give. A variable left at its default, as .env.example spells them all, chooses nothing.
 */
export function stateConfig (env: Env, redis: { topology: RedisTopology, variable: string } | null): StateConfig {
  const redisVariable = redis?.variable ?? null
  const commandTimeoutMs = durationMs(env, 'REDIS_COMMAND_TIMEOUT_MS')
  const replicaAcks = { count: env.REDIS_REPLICA_ACKS, timeoutMs: durationMs(env, 'REDIS_REPLICA_ACK_TIMEOUT_MS') }
  const topologies = REDIS_TOPOLOGY_VARIABLES.join(', ')
  if (redisVariable === null) {
    if (replicaAcks.count > 0) throw new ConfigError('REDIS_REPLICA_ACKS', `is only used with one of ${topologies}: the embedded default has no replicas`)
    if (commandTimeoutMs !== defaultDurationMs('REDIS_COMMAND_TIMEOUT_MS')) throw new ConfigError('REDIS_COMMAND_TIMEOUT_MS', `is only used with one of ${topologies}`)
  } else if (env.MEMORY_STORE_MAX_TOKENS !== EnvSchema.properties.MEMORY_STORE_MAX_TOKENS.default) {
    throw new ConfigError('MEMORY_STORE_MAX_TOKENS', `is only used on the embedded default, not with ${redisVariable} (Redis holds the codes)`)
  }
  if (replicaAcks.count === 0 && replicaAcks.timeoutMs !== defaultDurationMs('REDIS_REPLICA_ACK_TIMEOUT_MS')) {
    throw new ConfigError('REDIS_REPLICA_ACK_TIMEOUT_MS', 'is only used with REDIS_REPLICA_ACKS of 1 or more')
  }
  if (replicaAcks.count > 0 && replicaAcks.timeoutMs >= commandTimeoutMs) {
    // WAIT holds its connection until it returns: every command behind it would time out first.
    throw new ConfigError('REDIS_REPLICA_ACK_TIMEOUT_MS', `must be below REDIS_COMMAND_TIMEOUT_MS (${commandTimeoutMs} ms), or the commands behind a WAIT time out before it returns (got ${replicaAcks.timeoutMs} ms)`)
  }
  return {
    redisUrl: env.REDIS_URL ?? null,
    redis: redis?.topology ?? null,
    redisCommandTimeoutMs: commandTimeoutMs,
    redisReplicaAcks: replicaAcks,
    memoryStoreMaxTokens: env.MEMORY_STORE_MAX_TOKENS,
    verificationLog: { retentionMs: env.VERIFICATION_LOG_DAYS * 86_400_000, maxPerScope: env.VERIFICATION_LOG_MAX_PER_TENANT },
    insights: { retentionMs: env.INSIGHTS_DAYS * 86_400_000 }
  }
}

/** `host:port,host:port`; an IPv6 host goes in brackets, `[::1]:26379`. */
function parseRedisNodes (variable: string, value: string): RedisNode[] {
  const nodes: RedisNode[] = []
  for (const entry of value.split(',').map((item) => item.trim()).filter((item) => item !== '')) {
    const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):([0-9]{1,5})$/.exec(entry)
    const port = Number(match?.[3])
    const host = match?.[1] ?? match?.[2]
    if (host === undefined || !(port >= 1 && port <= 65535)) {
      throw new ConfigError(variable, `must be comma-separated host:port pairs (got ${JSON.stringify(entry)})`)
    }
    nodes.push({ host, port })
  }
  if (nodes.length === 0) throw new ConfigError(variable, 'must name at least one host:port')
  return nodes
}
