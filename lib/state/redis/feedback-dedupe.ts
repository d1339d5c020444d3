import type { RedisClient } from './client.js'
import { feedbackKey } from './keys.js'
import { storeCall } from '../../store-errors.js'
import type { FeedbackDedupe } from '../feedback-dedupe.js'

/** One key per handled MessageId, expiring after the replay window; shared by every instance. */
export class RedisFeedbackDedupe implements FeedbackDedupe {
  readonly #client: RedisClient
  readonly #ttlMs: number

  /** `ttlMs`: how long an id is remembered (the feedback's replay window). */
  constructor (client: RedisClient, ttlMs: number) {
    this.#client = client
    this.#ttlMs = ttlMs
  }

  async claim (messageId: string): Promise<boolean> {
    return await storeCall('feedback dedupe', async () => await this.#client.set(feedbackKey(messageId), '1', 'PX', this.#ttlMs, 'NX')) === 'OK'
  }

  async release (messageId: string): Promise<void> {
    await storeCall('feedback dedupe', async () => await this.#client.del(feedbackKey(messageId)))
  }
}
