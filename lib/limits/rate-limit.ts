import { parseWindow } from './window.js'

/** A velocity limit: at most `max` requests per `windowMs`. */
export interface RateLimit {
  max: number
  windowMs: number
  /** As written, e.g. `5/15m`, for messages. */
  spec: string
}

/** Parses `max/window` (`5/15m`, `30/1m`, `600/1h`), or null. */
export function parseRateLimit (spec: string): RateLimit | null {
  const [max, windowSpec] = spec.split('/')
  if (max === undefined || windowSpec === undefined || !/^[0-9]{1,9}$/.test(max)) return null
  const window = parseWindow(windowSpec)
  if (window === null || window.kind !== 'fixed') return null
  return { max: Number(max), windowMs: window.durationMs, spec }
}

/** The per-tenant limits (a tenant's `limits` override them one by one). */
export interface VelocityLimits {
  source: RateLimit
  backend: RateLimit
  recipient: RateLimit
  key: RateLimit
}
