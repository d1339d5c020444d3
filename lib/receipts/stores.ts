import type { RedisClient } from '../redis/client.js'
import { MemoryRedemptionStore } from './memory-redemption-store.js'
import type { RedemptionStore } from './redemption-store.js'
import { RedisRedemptionStore } from './redis-redemption-store.js'

export interface ReceiptStores {
  redemptions: RedemptionStore
  close (): Promise<void>
}

/** The receipt stores: in Redis when there is one (shared by every instance), else in memory. */
export function createReceiptStores (redis: RedisClient | null): ReceiptStores {
  const redemptions = redis === null ? new MemoryRedemptionStore() : new RedisRedemptionStore(redis)
  return { redemptions, close: async () => { await redemptions.close() } }
}
