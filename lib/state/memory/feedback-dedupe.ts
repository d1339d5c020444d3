import { LruMap } from 'toad-cache'
import { DEDUPE_TTL_MS } from '../../feedback/ses-feedback.js'
import type { FeedbackDedupe } from '../feedback-dedupe.js'

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
