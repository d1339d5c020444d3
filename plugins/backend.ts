import fp from 'fastify-plugin'
import { createBackend, type Backend } from '../lib/backend.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Every store: tokens, admission counters, quota, idempotency, sandbox inbox. */
    backend: Backend
  }
}

/** The stores, in memory or in Redis as configured (lib/backend.ts chooses), closed on close. */
export default fp(async function backendPlugin (fastify) {
  const { config } = fastify
  const backend = createBackend(fastify.redis, { memoryStoreMaxTokens: config.memoryStoreMaxTokens, webhookQueue: { perTenant: config.webhooks.maxQueuedPerTenant } })
  fastify.decorate('backend', backend)
  fastify.addHook('onClose', async () => { await backend.close() })
}, { name: 'backend', dependencies: ['config', 'redis'], fastify: '5.x' })
