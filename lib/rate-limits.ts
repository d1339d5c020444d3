import { parseWindow } from './quota/window.js'

/** A velocity limit: at most `max` requests per `windowMs`. */
export interface RateLimit {
  max: number
  windowMs: number
  /** As written, e.g. `5/15m`, for messages. */
  spec: string
}

export const RATE_LIMIT_PATTERN = '^[0-9]{1,9}/[1-9][0-9]{0,6}[smhd]$'

/** Parses `max/window` (`5/15m`, `30/1m`, `600/1h`), or null. */
export function parseRateLimit (spec: string): RateLimit | null {
  const [max, windowSpec] = spec.split('/')
  if (max === undefined || windowSpec === undefined || !/^[0-9]{1,9}$/.test(max)) return null
  const window = parseWindow(windowSpec)
  if (window === null || window.kind !== 'fixed') return null
  return { max: Number(max), windowMs: window.durationMs, spec }
}

export interface VelocityLimits {
  recipient: RateLimit
  source: RateLimit
  key: RateLimit
}

/**
 * One hit on a fixed-window counter, as a Lua function for scripts that check several limits
 * in one round trip. It is the algorithm of @fastify/rate-limit's Redis store (without
 * `continueExceeding` and backoff), on the same keys, so both can count one bucket: INCR, the
 * window starts with the first hit. Returns the count and the milliseconds left in the window.
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
