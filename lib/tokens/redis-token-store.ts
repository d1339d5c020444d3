import type { RedisClient } from '../redis/client.js'
import { storeCall } from '../store-errors.js'
import type { TokenStore } from './token-store.js'

/**
 * Tokens in Redis, shared by every instance. `SET … PX … NX` writes value and expiry in one
 * step; `GETDEL` makes every verify a single atomic consume. Every command touches one key,
 * so on a Cluster tokens spread over all slots and need no hash tag.
 */
export class RedisTokenStore implements TokenStore {
  readonly kind = 'redis'
  readonly #client: RedisClient

  constructor (client: RedisClient) {
    this.#client = client
  }

  async put (key: string, record: string, ttlMs: number): Promise<boolean> {
    return await storeCall('token put', async () => await this.#client.set(key, record, 'PX', ttlMs, 'NX') === 'OK')
  }

  async take (key: string): Promise<string | null> {
    return await storeCall('token take', async () => await this.#client.getdel(key))
  }

  async delete (key: string): Promise<void> {
    await storeCall('token delete', async () => await this.#client.del(key))
  }

  async ready (): Promise<boolean> {
    if (this.#client.status !== 'ready') return false
    try {
      return await this.#client.ping() === 'PONG'
    } catch {
      return false
    }
  }

  /** The Redis client belongs to the redis plugin, which closes it. */
  async close (): Promise<void> {}
}
