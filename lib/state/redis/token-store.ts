import { Cluster } from 'ioredis'
import type { RedisClient } from './client.js'
import { storeCall, storeUndo } from '../../store-errors.js'
import type { TokenRef, TokenStore } from '../tokens.js'
import { tokenKey } from './keys.js'

/**
 * Tokens in Redis, shared by every instance, for what happens outside admission: the
 * clean-up of a code whose mail did not leave, and readiness. The admission scripts write and
 * consume them (lib/state/redis/scripts.ts).
 */
export class RedisTokenStore implements TokenStore {
  readonly #client: RedisClient

  constructor (client: RedisClient) {
    this.#client = client
  }

  /** Sent even when this request found Redis stalled: a late deletion only removes a code whose mail did not leave. */
  async delete ({ tenantId, mode, requestId }: TokenRef): Promise<void> {
    const key = tokenKey(tenantId, mode, requestId)
    await storeUndo('token delete', async () => await this.#client.del(key))
  }

  /**
   * Redis answers. On a Cluster, one primary answering is enough: every instance depends on the
   * same primaries, so taking instances out of service for one that is down (its tenants answer
   * 503) would stop every other tenant too.
   */
  async ready (): Promise<boolean> {
    const client = this.#client
    if (client.status !== 'ready') return false
    const servers = client instanceof Cluster ? client.nodes('master') : [client]
    try {
      return await Promise.any(servers.map(async (server) => await storeCall('token store ping', async () => await server.ping()))) === 'PONG'
    } catch {
      return false
    }
  }
}
