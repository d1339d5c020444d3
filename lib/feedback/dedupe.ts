import { LruMap } from 'toad-cache'
import type { RedisClient } from '../redis/client.js'
import { storeCall } from '../store-errors.js'
import { DEDUPE_TTL_MS, type FeedbackDedupe } from './ses-feedback.js'

/**
 * MessageIds kept in process. Only signed messages of the configured topics reach it, so its
 * size follows the mail the service sent; past it the oldest ids are forgotten, and a replay of
 * one of those could count twice (a webhook sent again, a suppression renewed).
 */
export const MEMORY_DEDUPE_ENTRIES = 100_000

export class MemoryFeedbackDedupe implements FeedbackDedupe {
  readonly #seen = new LruMap<true>(MEMORY_DEDUPE_ENTRIES, DEDUPE_TTL_MS)

  async claim (messageId: string): Promise<boolean> {
    if (this.#seen.get(messageId) === true) return false
    this.#seen.set(messageId, true)
    return true
  }

  async release (messageId: string): Promise<void> {
    this.#seen.delete(messageId)
  }
}

/** One key per handled MessageId, expiring after the replay window; shared by every instance. */
export class RedisFeedbackDedupe implements FeedbackDedupe {
  readonly #client: RedisClient

  constructor (client: RedisClient) {
    this.#client = client
  }

  async claim (messageId: string): Promise<boolean> {
    return await storeCall('feedback dedupe', async () => await this.#client.set(`feedback:sns:${messageId}`, '1', 'PX', DEDUPE_TTL_MS, 'NX')) === 'OK'
  }

  async release (messageId: string): Promise<void> {
    await storeCall('feedback dedupe', async () => await this.#client.del(`feedback:sns:${messageId}`))
  }
}
