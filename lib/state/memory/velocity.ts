import type { WindowCount } from '../admission.js'
import { ShareLru } from '../../lru/share-lru.js'

/*
 * Velocity is a fixed-window counter: the window starts with a bucket's first hit and lasts
 * `windowMs`; each hit adds one and answers the count and the time left. This is the algorithm
 * of @fastify/rate-limit's stores (without `continueExceeding` and backoff). It exists twice,
 * with one contract checked by one shared test (test/lib/state/velocity.test.ts): a Lua
 * function for the admission scripts on Redis, and MemoryVelocityCounter in process.
 */

/**
 * The in-process twin of HIT_LIMIT_LUA, for the embedded default. Buckets live in shares
 * (lib/state/memory/admission.ts names them: one per kind of limit and tenant scope), each an LRU map of
 * `bucketsPerShare`: past it the least recently hit buckets of that share are forgotten,
 * which bounds memory under a flood of distinct sources without letting a flood through one
 * tenant reset another's counters.
 */
export class MemoryVelocityCounter {
  readonly #buckets: ShareLru<{ count: number, endsAtMs: number }>

  constructor (bucketsPerShare: number) {
    this.#buckets = new ShareLru(bucketsPerShare)
  }

  hit (share: string, bucket: string, windowMs: number, nowMs = Date.now()): WindowCount {
    const entry = this.#buckets.get(share, bucket)
    if (entry === undefined || entry.endsAtMs <= nowMs) {
      this.#buckets.set(share, bucket, { count: 1, endsAtMs: nowMs + windowMs })
      return { current: 1, ttlMs: windowMs }
    }
    // get() has already moved the bucket to the recent end of its share's LRU order.
    entry.count++
    return { current: entry.count, ttlMs: entry.endsAtMs - nowMs }
  }

  /** The bucket's count in its current window, without a hit (0 when it has none). */
  peek (share: string, bucket: string, nowMs = Date.now()): number {
    const entry = this.#buckets.get(share, bucket)
    return entry === undefined || entry.endsAtMs <= nowMs ? 0 : entry.count
  }

  /** Takes one hit back from the bucket's current window: never below zero, nothing once the window is over. */
  giveBack (share: string, bucket: string, nowMs = Date.now()): void {
    const entry = this.#buckets.get(share, bucket)
    if (entry !== undefined && entry.endsAtMs > nowMs && entry.count > 0) entry.count--
  }
}
