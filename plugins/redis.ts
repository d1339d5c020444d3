import fp from 'fastify-plugin'
import { Cluster, Redis, type RedisOptions } from 'ioredis'
import type { RedisTopology } from '../lib/config.js'
import type { RedisClient } from '../lib/redis/client.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The shared Redis connection, or null on the embedded (in-memory) default. */
    redis: RedisClient | null
  }
}

/** Reconnect forever, backing off to one attempt every two seconds. */
const backoff = (attempt: number): number => Math.min(100 * attempt, 2000)

/**
 * The client for a topology. Every kind fails fast: no offline queue, no retries per command,
 * a command timeout, so an outage becomes a 503 in well under a second instead of a hang.
 * Commands only ever go to a primary, so a read never sees a replica's stale copy (a token
 * already consumed, a counter behind).
 */
function createClient (topology: RedisTopology, commandTimeout: number, connectTimeout: number): RedisClient {
  const failFast = { maxRetriesPerRequest: 0, commandTimeout, connectTimeout } satisfies RedisOptions
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
        sentinelCommandTimeout: connectTimeout
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
        slotsRefreshTimeout: connectTimeout,
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

/**
 * One Redis connection for every store (tokens, limiters, lockout, quota, idempotency, sandbox
 * inbox), to a single server, the primary a set of Sentinels names, or a Cluster. The client
 * reconnects forever in the background (and follows failovers), so the service recovers by
 * itself. Boot does not wait for Redis (unlike @fastify/redis, whose registration blocks until
 * the first connection): a process started during an outage serves 503 and reports not-ready
 * until Redis answers.
 */
export default fp(async function redisPlugin (fastify) {
  const { redis: topology, redisCommandTimeoutMs } = fastify.config
  if (topology === null) {
    fastify.decorate('redis', null)
    return
  }
  const connectTimeout = Math.max(1000, redisCommandTimeoutMs * 2)
  const client = createClient(topology, redisCommandTimeoutMs, connectTimeout)
  let healthy = true
  client.on('ready', () => {
    if (!healthy) fastify.log.info('redis connection restored')
    healthy = true
  })
  // Without a listener, ioredis would turn every reconnect failure into an uncaught error.
  client.on('error', (error: NodeJS.ErrnoException) => {
    if (healthy) fastify.log.error({ err: { code: error.code, message: error.message }, topology: topology.kind }, 'redis connection lost')
    healthy = false
  })
  // Typed explicitly: inferred through decorate's conditional type, the union collapses to Redis.
  fastify.decorate<RedisClient>('redis', client)
  fastify.addHook('onClose', async () => {
    client.disconnect()
  })
  // A healthy Redis is connected before the first request (commands are not queued while
  // connecting); an unreachable one delays start-up by one connect timeout, no more.
  // (events.once would reject on the first connection error; only 'ready' matters here.)
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, connectTimeout)
    client.once('ready', () => {
      clearTimeout(timer)
      resolve()
    })
  })
}, { name: 'redis', dependencies: ['config'], fastify: '5.x' })
