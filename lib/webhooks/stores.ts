import type { RedisClient } from '../redis/client.js'
import { MemoryWebhookQueue } from './memory-queue.js'
import type { WebhookQueue } from './queue.js'
import { RedisWebhookQueue } from './redis-queue.js'

export interface WebhookStores {
  queue: WebhookQueue
  close (): Promise<void>
}

/**
 * The webhook stores: a Redis stream shared by every instance (durable across their restarts)
 * when there is Redis, else a queue in this process, lost when it stops.
 */
export function createWebhookStores (redis: RedisClient | null): WebhookStores {
  const queue = redis === null ? new MemoryWebhookQueue() : new RedisWebhookQueue(redis)
  return { queue, close: async () => { await queue.close() } }
}
