import type { RedisClient } from '../redis/client.js'
import { storeCall } from '../store-errors.js'
import { assertRedemption, redemptionKey, type RedemptionStore } from './redemption-store.js'

/**
 * Redeemed receipts in Redis, shared by every instance: `SET key 1 PX ttl NX` marks a receipt
 * and tells whether it was the first, in one atomic command.
 */
export class RedisRedemptionStore implements RedemptionStore {
  readonly #client: RedisClient

  constructor (client: RedisClient) {
    this.#client = client
  }

  async redeem (scope: string, jti: string, ttlMs: number): Promise<boolean> {
    assertRedemption(scope, jti, ttlMs)
    return await storeCall('receipt redemption', async () => await this.#client.set(redemptionKey(scope, jti), '1', 'PX', ttlMs, 'NX') === 'OK')
  }

  /** The Redis client belongs to whoever opened it. */
  async close (): Promise<void> {}
}
