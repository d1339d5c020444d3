import { Cluster, Redis, type RedisOptions } from 'ioredis'
import type { RedisTopology } from './topology.js'

/**
 * The shared connection the Redis-backed stores take: one server (plain or found through
 * Sentinel) or a Cluster. Both speak the same commands; every script and MULTI the stores run
 * touches keys of a single hash slot, so they work on either.
 */
export type RedisClient = Redis | Cluster

export interface RedisTimeouts {
  commandTimeoutMs: number
  connectTimeoutMs: number
}

/**
 * The margin between a fenced script's deadline and its caller's timeout (lib/state/redis/fence.ts):
 * the time a script that started just before its deadline has to run and its reply to come back.
 */
export function fenceMarginMs (commandTimeoutMs: number): number {
  return Math.min(100, Math.floor(commandTimeoutMs / 4))
}

/**
 * ioredis's own command timeout, a backstop a margin behind the one each request's store calls
 * keep (withStoreBudget, lib/store-errors.ts), which decides first unless the process is badly
 * late: a command rejected by ioredis loses a reply that may already be waiting to be read.
 */
function backstopTimeoutMs (commandTimeoutMs: number): number {
  return commandTimeoutMs + fenceMarginMs(commandTimeoutMs)
}

const commandTimeouts = new WeakMap<RedisClient, number>()

/** REDIS_COMMAND_TIMEOUT_MS of a client made by createRedisClient. */
export function commandTimeoutOf (client: RedisClient): number | undefined {
  return commandTimeouts.get(client)
}

/** Reconnect forever, backing off to one attempt every two seconds. */
const backoff = (attempt: number): number => Math.min(100 * attempt, 2000)

/**
 * The client for a topology. Every kind fails fast: no offline queue, no retries per command,
 * a command timeout (each request's, and a backstop), so an outage becomes a 503 within
 * REDIS_COMMAND_TIMEOUT_MS instead of a hang.
 * Commands only ever go to a primary, so a read never sees a replica's stale copy (a token
 * already consumed, a counter behind).
 */
export function createRedisClient (topology: RedisTopology, timeouts: RedisTimeouts): RedisClient {
  const client = createClient(topology, timeouts)
  commandTimeouts.set(client, timeouts.commandTimeoutMs)
  return client
}

function createClient (topology: RedisTopology, { commandTimeoutMs, connectTimeoutMs }: RedisTimeouts): RedisClient {
  const failFast = { maxRetriesPerRequest: 0, commandTimeout: backstopTimeoutMs(commandTimeoutMs), connectTimeout: connectTimeoutMs } satisfies RedisOptions
  switch (topology.kind) {
    case 'single':
      return new Redis(topology.url, {
        ...failFast,
        enableOfflineQueue: false,
        enableAutoPipelining: true,
        retryStrategy: backoff
      })
    case 'sentinel': {
      const tls = topology.tls ? {} : undefined
      return new Redis({
        ...failFast,
        enableOfflineQueue: false,
        enableAutoPipelining: true,
        retryStrategy: backoff,
        sentinels: topology.sentinels,
        name: topology.name,
        // ioredis checks the role of the server it reaches, so a replica is never used.
        role: 'master',
        username: topology.username ?? undefined,
        password: topology.password ?? undefined,
        tls,
        enableTLSForSentinelMode: topology.tls,
        sentinelTLS: tls,
        // Sentinels unreachable: keep asking them, as for the primary itself.
        sentinelRetryStrategy: backoff,
        // A hung Sentinel must not stall reconnection.
        sentinelCommandTimeout: connectTimeoutMs
        // No failoverDetector: when its +switch-master arrives while a reconnect is asking a
        // Sentinel, ioredis ends the client for good (seen in test/redis-sentinel.test.ts).
        // It is not needed either: a dead primary closes the connection, and Sentinel kills
        // the clients of a primary it demotes, so the client asks the Sentinels again.
      })
    }
    case 'cluster':
      return new Cluster(topology.nodes, {
        enableOfflineQueue: false,
        enableAutoPipelining: true,
        scaleReads: 'master',
        clusterRetryStrategy: backoff,
        // No clusterNodeRetryStrategy: a node that drops out is forgotten, its slots answer 503
        // at once, and the slot map finds it again when it is back. Redialling it instead would
        // hold its commands until they time out.
        slotsRefreshTimeout: connectTimeoutMs,
        // Certificates name the hosts given, so TLS must connect to them, not to resolved IPs.
        ...(topology.tls ? { dnsLookup: (address: string, callback: (error: null, address: string) => void) => { callback(null, address) } } : {}),
        redisOptions: {
          ...failFast,
          username: topology.username ?? undefined,
          password: topology.password ?? undefined,
          tls: topology.tls ? {} : undefined
        }
      })
  }
}

/** A short-lived client for one command of a command-line tool: a few retries, then a clear failure. */
export function createToolRedisClient (topology: RedisTopology): RedisClient {
  const options = { maxRetriesPerRequest: 2, connectTimeout: 5000, retryStrategy: (attempt: number) => attempt > 3 ? null : 200 * attempt }
  switch (topology.kind) {
    case 'single':
      return new Redis(topology.url, options)
    case 'sentinel':
      return new Redis({
        ...options,
        sentinels: topology.sentinels,
        name: topology.name,
        role: 'master',
        username: topology.username ?? undefined,
        password: topology.password ?? undefined,
        tls: topology.tls ? {} : undefined,
        enableTLSForSentinelMode: topology.tls
      })
    case 'cluster':
      return new Cluster(topology.nodes, {
        scaleReads: 'master',
        redisOptions: { ...options, username: topology.username ?? undefined, password: topology.password ?? undefined, tls: topology.tls ? {} : undefined }
      })
  }
}

/** Where the connection's losses and recoveries are logged. */
export interface ConnectionLog {
  info (message: string): void
  error (bindings: object, message: string): void
}

/**
 * The one Redis connection of the process (createRedisClient for the configured topology),
 * shared by every store. The client reconnects forever in the background (and follows
 * failovers), so the service recovers by itself. This waits one connect timeout at most: a
 * process started during an outage serves 503 and reports not-ready until Redis answers
 * (which is why the service does not use @fastify/redis, whose registration waits for the
 * first connection and fails boot while Redis is down).
 */
export async function connectRedis (topology: RedisTopology, timeouts: RedisTimeouts, log: ConnectionLog): Promise<RedisClient> {
  const { connectTimeoutMs } = timeouts
  const client = createRedisClient(topology, timeouts)
  let healthy = true
  client.on('ready', () => {
    if (!healthy) log.info('redis connection restored')
    healthy = true
  })
  // Without a listener, ioredis would turn every reconnect failure into an uncaught error.
  client.on('error', (error: NodeJS.ErrnoException) => {
    if (healthy) log.error({ err: { code: error.code, message: error.message }, topology: topology.kind }, 'redis connection lost')
    healthy = false
  })
  // A healthy Redis is connected before the first request (commands are not queued while
  // connecting); an unreachable one delays start-up by one connect timeout, no more.
  // (events.once would reject on the first connection error; only 'ready' matters here.)
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, connectTimeoutMs)
    client.once('ready', () => {
      clearTimeout(timer)
      resolve()
    })
  })
  return client
}
