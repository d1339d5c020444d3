import fp from 'fastify-plugin'
import { createState, type State } from '../lib/state/index.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Every store: tokens, admission counters, quota, idempotency, sandbox inbox. */
    backend: State
  }
}

/** The stores, in memory or in Redis as configured (lib/state/index.ts chooses), closed on close. */
export default fp(async function backendPlugin (fastify) {
  const { config } = fastify
  const backend = createState(fastify.redis, { memoryStoreMaxTokens: config.memoryStoreMaxTokens, replicaAcks: config.redisReplicaAcks, webhookQueue: { perTenant: config.webhooks.maxQueuedPerTenant }, log: fastify.log })
  fastify.decorate('backend', backend)
  // At start-up, so that a Redis allowed to evict keys is logged before the first probe.
  fastify.addHook('onReady', async () => { await backend.ready() })
  fastify.addHook('onClose', async () => { await backend.close() })
}, { name: 'backend', dependencies: ['config', 'redis'], fastify: '5.x' })
