import type { RedisClient } from './client.js'
import { feedbackKey } from './keys.js'
import { storeCall } from '../../store-errors.js'
import { DEDUPE_TTL_MS } from '../../feedback/ses-feedback.js'
import type { FeedbackDedupe } from '../feedback-dedupe.js'

/** One key per handled MessageId, expiring after the replay window; shared by every instance. */
export class RedisFeedbackDedupe implements FeedbackDedupe {
  readonly #client: RedisClient

  constructor (client: RedisClient) {
    this.#client = client
  }

  async claim (messageId: string): Promise<boolean> {
    return await storeCall('feedback dedupe', async () => await this.#client.set(feedbackKey(messageId), '1', 'PX', DEDUPE_TTL_MS, 'NX')) === 'OK'
  }

  async release (messageId: string): Promise<void> {
    await storeCall('feedback dedupe', async () => await this.#client.del(feedbackKey(messageId)))
  }
}
