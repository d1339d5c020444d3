/**
 * Wrong guesses per recipient, across requestIds, in one process. The window starts with the
 * first failure and is not extended by later ones, so a locked recipient is free again when
 * it ends.
 */
export class MemoryGuessCounter {
  readonly #entries = new Map<string, { count: number, expiresAt: number }>()
  readonly #timer: NodeJS.Timeout

  constructor () {
    this.#timer = setInterval(() => {
      const now = Date.now()
      for (const [key, entry] of this.#entries) if (entry.expiresAt <= now) this.#entries.delete(key)
    }, 60_000)
    this.#timer.unref()
  }

  recordFailure (key: string, windowMs: number): void {
    const now = Date.now()
    const entry = this.#entries.get(key)
    if (entry === undefined || entry.expiresAt <= now) this.#entries.set(key, { count: 1, expiresAt: now + windowMs })
    else entry.count++
  }

  /** Failures in the current window and the milliseconds until it ends. */
  failures (key: string): { count: number, resetMs: number } {
    const entry = this.#entries.get(key)
    const remaining = entry === undefined ? 0 : entry.expiresAt - Date.now()
    return remaining > 0 && entry !== undefined ? { count: entry.count, resetMs: remaining } : { count: 0, resetMs: 0 }
  }

  reset (key: string): void {
    this.#entries.delete(key)
  }

  close (): void {
    clearInterval(this.#timer)
  }
}

/**
 * The counter in Redis, as Lua functions for the scripts that fold the lockout into a
 * dispatch or verify round trip (lib/admission). `failures` answers 0, 0 when
 * no window is running. `recordFailure` is INCR, and on the first failure of a window its end.
 */
export const LOCKOUT_LUA = `
local function lockoutFailures (key)
  local count = redis.call('GET', key)
  if not count then return 0, 0 end
  local ttl = redis.call('PTTL', key)
  if ttl <= 0 then return 0, 0 end
  return tonumber(count), ttl
end
local function recordFailure (key, windowMs)
  local count = redis.call('INCR', key)
  if count == 1 then redis.call('PEXPIRE', key, windowMs) end
  return count
end
`
