import fp from 'fastify-plugin'
import { Redis } from 'ioredis'

declare module 'fastify' {
  interface FastifyInstance {
    /** The shared Redis connection, or null on the embedded (in-memory) default. */
    redis: Redis | null
  }
}

/**
 * One Redis connection for every store. Settings fail fast: no offline queue, no retries
 * per command, a command timeout, so an outage becomes a 503 in well under a second instead
 * of a hang. The client reconnects forever in the background, so the service recovers by
 * itself. Boot does not wait for Redis (unlike @fastify/redis, whose registration blocks
 * until the first connection): a process started during an outage serves 503 and reports
 * not-ready until Redis answers.
 */
export default fp(async function redisPlugin (fastify) {
  const { redisUrl, redisCommandTimeoutMs } = fastify.config
  if (redisUrl === null) {
    fastify.decorate('redis', null)
    return
  }
  const connectTimeout = Math.max(1000, redisCommandTimeoutMs * 2)
  const client = new Redis(redisUrl, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: redisCommandTimeoutMs,
    connectTimeout,
    enableAutoPipelining: true,
    retryStrategy: (attempt) => Math.min(100 * attempt, 2000)
  })
  let healthy = true
  client.on('ready', () => {
    if (!healthy) fastify.log.info('redis connection restored')
    healthy = true
  })
  // Without a listener, ioredis would turn every reconnect failure into an uncaught error.
  client.on('error', (error: NodeJS.ErrnoException) => {
    if (healthy) fastify.log.error({ err: { code: error.code, message: error.message } }, 'redis connection lost')
    healthy = false
  })
  fastify.decorate('redis', client)
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
