import fp from 'fastify-plugin'
import { createRedisClient, type RedisClient } from '../lib/state/redis/client.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The shared Redis connection, or null on the embedded (in-memory) default. */
    redis: RedisClient | null
  }
}

/**
 * The one Redis connection of the process (lib/state/redis/client.ts builds it for the configured
 * topology), shared by every store. The client reconnects forever in the background (and
 * follows failovers), so the service recovers by itself. Boot waits one connect timeout at
 * most: a process started during an outage serves 503 and reports not-ready until Redis
 * answers. That is why this plugin owns the connection rather than @fastify/redis, whose
 * registration waits for the first connection (and fails boot with FST_ERR_PLUGIN_TIMEOUT
 * while Redis is down).
 */
export default fp(async function redisPlugin (fastify) {
  const { redis: topology, redisCommandTimeoutMs } = fastify.config
  if (topology === null) {
    fastify.decorate('redis', null)
    return
  }
  const connectTimeoutMs = Math.max(1000, redisCommandTimeoutMs * 2)
  const client = createRedisClient(topology, { commandTimeoutMs: redisCommandTimeoutMs, connectTimeoutMs })
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
    const timer = setTimeout(resolve, connectTimeoutMs)
    client.once('ready', () => {
      clearTimeout(timer)
      resolve()
    })
  })
}, { name: 'redis', dependencies: ['config'], fastify: '5.x' })
