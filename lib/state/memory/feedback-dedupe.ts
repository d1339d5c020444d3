import { LruMap } from 'toad-cache'
import type { FeedbackDedupe } from '../feedback-dedupe.js'

/**
 * MessageIds kept in process. Only signed messages of the configured topics reach it, so its
 * size follows the mail the service sent; past it the oldest ids are forgotten, and a replay of
 * one of those could count twice (a webhook sent again, a suppression renewed).
 */
export const MEMORY_DEDUPE_ENTRIES = 100_000

export class MemoryFeedbackDedupe implements FeedbackDedupe {
  readonly #seen: LruMap<true>

  /** `ttlMs`: how long an id is remembered (the feedback's replay window). */
  constructor (ttlMs: number) {
    this.#seen = new LruMap<true>(MEMORY_DEDUPE_ENTRIES, ttlMs)
  }

  async claim (messageId: string): Promise<boolean> {
    if (this.#seen.get(messageId) === true) return false
    this.#seen.set(messageId, true)
    return true
  }

  async release (messageId: string): Promise<void> {
    this.#seen.delete(messageId)
  }
}
