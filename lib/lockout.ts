import type { RedisClient } from './redis-client.js'
import { storeCall } from './store-errors.js'

/**
 * Wrong guesses per recipient, across requestIds. The window starts with the first failure
 * and is not extended by later ones, so a locked recipient is free again when it ends.
 */
export interface GuessCounter {
  recordFailure (key: string, windowMs: number): Promise<void>
  /** Failures in the current window and the milliseconds until it ends. */
  failures (key: string): Promise<{ count: number, resetMs: number }>
  reset (key: string): Promise<void>
}

export class MemoryGuessCounter implements GuessCounter {
  readonly #entries = new Map<string, { count: number, expiresAt: number }>()
  readonly #timer: NodeJS.Timeout

  constructor () {
    this.#timer = setInterval(() => {
      const now = Date.now()
      for (const [key, entry] of this.#entries) if (entry.expiresAt <= now) this.#entries.delete(key)
    }, 60_000)
    this.#timer.unref()
  }

  async recordFailure (key: string, windowMs: number): Promise<void> {
    const now = Date.now()
    const entry = this.#entries.get(key)
    if (entry === undefined || entry.expiresAt <= now) this.#entries.set(key, { count: 1, expiresAt: now + windowMs })
    else entry.count++
  }

  async failures (key: string): Promise<{ count: number, resetMs: number }> {
    const entry = this.#entries.get(key)
    const remaining = entry === undefined ? 0 : entry.expiresAt - Date.now()
    return remaining > 0 && entry !== undefined ? { count: entry.count, resetMs: remaining } : { count: 0, resetMs: 0 }
  }

  async reset (key: string): Promise<void> {
    this.#entries.delete(key)
  }

  close (): void {
    clearInterval(this.#timer)
  }
}

// INCR, and on the first failure of a window set its end: one command instead of a MULTI.
const RECORD_FAILURE = `
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return count`

type CounterClient = RedisClient & { emailOtpRecordFailure: (key: string, windowMs: number) => Promise<number> }

export class RedisGuessCounter implements GuessCounter {
  readonly #client: CounterClient

  constructor (client: RedisClient) {
    client.defineCommand('emailOtpRecordFailure', { numberOfKeys: 1, lua: RECORD_FAILURE })
    this.#client = client as CounterClient
  }

  async recordFailure (key: string, windowMs: number): Promise<void> {
    await storeCall('guess counter write', async () => await this.#client.emailOtpRecordFailure(key, windowMs))
  }

  async failures (key: string): Promise<{ count: number, resetMs: number }> {
    const [count, ttl] = await storeCall('guess counter read', async () => await Promise.all([this.#client.get(key), this.#client.pttl(key)]))
    return count === null || ttl <= 0 ? { count: 0, resetMs: 0 } : { count: Number(count), resetMs: ttl }
  }

  async reset (key: string): Promise<void> {
    await storeCall('guess counter reset', async () => await this.#client.del(key))
  }
}
