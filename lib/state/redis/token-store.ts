import type { RedisClient } from './client.js'
import { storeCall, storeUndo } from '../../store-errors.js'
import type { TokenStore } from '../tokens.js'

/**
 * The token write and take as Lua functions, for the admission scripts that fold them into
 * a dispatch's or a verify's one round trip (lib/state/redis/admission.ts):
 * `tokenExists` before anything is counted (a taken requestId is a retry with a new one),
 * `writeToken` with its expiry in one SET, `readToken` and `setTokenAside` in the same script,
 * so a code is consumed atomically by the first verify, right or wrong, and a verify refused
 * between the two (the key's bucket) leaves it in place. A consumed token is renamed, not
 * deleted: under a name of that verify's own, with the expiry it had, so that a verify whose
 * answer never reached its caller (who answered 503) can put the code back for the retry.
 */
export const TOKEN_LUA = `
local function tokenExists (key)
  return redis.call('EXISTS', key) == 1
end
local function writeToken (key, record, ttlMs)
  redis.call('SET', key, record, 'PX', ttlMs)
end
local function readToken (key)
  return redis.call('GET', key)
end
local function setTokenAside (key, attempt)
  redis.call('RENAME', key, key .. ':used:' .. attempt)
end
`

/**
 * Tokens in Redis, shared by every instance, for what happens outside admission: the
 * clean-up of a code whose mail did not leave, readiness, and the stores' shared suite.
 * `SET … PX … NX` writes value and expiry in one step; `GETDEL` consumes atomically.
 */
export class RedisTokenStore implements TokenStore {
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

  /** Sent even when this request found Redis stalled: a late deletion only removes a code whose mail did not leave. */
  async delete (key: string): Promise<void> {
    await storeUndo('token delete', async () => await this.#client.del(key))
  }

  async ready (): Promise<boolean> {
    if (this.#client.status !== 'ready') return false
    try {
      return await storeCall('token store ping', async () => await this.#client.ping()) === 'PONG'
    } catch {
      return false
    }
  }
}
