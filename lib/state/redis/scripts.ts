/**
 * One hit, as a Lua function for scripts that check several limits in one round trip: INCR,
 * and PEXPIRE on the first hit of a window.
 */
export const HIT_LIMIT_LUA = `
local function hitLimit (key, windowMs)
  local current = redis.call('INCR', key)
  if current == 1 then
    redis.call('PEXPIRE', key, windowMs)
    return current, tonumber(windowMs)
  end
  return current, redis.call('PTTL', key)
end
`

/**
 * The state as a Redis hash `{ f: failures, u: locked until (epoch ms) }`. The clock is
 * Redis's own (TIME), so every instance agrees on when a lock ends.
 *
 * - `lockoutNow()`: milliseconds since the epoch, by the server.
 * - `lockedFor(key, now)`: ms left on the mailbox's lock, 0 when it is not locked.
 * - `recordFailure(key, now, threshold, baseMs, maxMs, resetAfterMs)`: one more failure; returns
 *   the ms of the lock it starts (0 when none).
 * - `clearLockout(key)`: a right guess, or a tenant clearing the lock.
 */
export const LOCKOUT_LUA = `
local function lockoutNow ()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local function lockedFor (key, now)
  local lockedUntil = tonumber(redis.call('HGET', key, 'u') or '0')
  if lockedUntil > now then return lockedUntil - now end
  return 0
end
local function recordFailure (key, now, threshold, baseMs, maxMs, resetAfterMs)
  local failures = redis.call('HINCRBY', key, 'f', 1)
  local lockMs = 0
  if failures >= threshold then
    lockMs = math.min(maxMs, baseMs * 2 ^ math.min(failures - threshold, 60))
    redis.call('HSET', key, 'u', now + lockMs)
  end
  redis.call('PEXPIRE', key, lockMs + resetAfterMs)
  return lockMs
end
local function clearLockout (key)
  return redis.call('DEL', key)
end
`
