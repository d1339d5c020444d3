/**
 * Quota windows: fixed windows aligned to the Unix epoch (`<n>s`, `<n>m`, `<n>h`, `<n>d`) or the UTC
 * calendar month (`month`). Fixed, aligned windows mean every instance computes the same window
 * id from the clock alone, so the id can name a shared counter without any coordination.
 */

export type QuotaWindow =
  | { readonly kind: 'fixed', readonly spec: string, readonly durationMs: number }
  | { readonly kind: 'month', readonly spec: 'month' }

export interface WindowBounds {
  /** Names this window: part of the counter key, and what `refund` is given back. */
  readonly id: string
  /** Inclusive start, epoch milliseconds. */
  readonly startMs: number
  /** Exclusive end, epoch milliseconds: when the allowance comes back. */
  readonly resetMs: number
}

const SECOND_MS = 1000
const MINUTE_MS = 60 * SECOND_MS
const HOUR_MS = 60 * MINUTE_MS
const DAY_MS = 24 * HOUR_MS

const UNIT_MS = { s: SECOND_MS, m: MINUTE_MS, h: HOUR_MS, d: DAY_MS } as const

const DURATION = /^([1-9][0-9]*)([smhd])$/

/**
 * Parses a window spec, or returns null when it is not one. Durations are normalised to the
 * largest whole unit (`60m` → `1h`, `1440m` → `1d`) so a cosmetic config edit does not change
 * the window ids and silently reset every tenant's count.
 */
export function parseWindow (spec: string): QuotaWindow | null {
  if (spec === 'month') return { kind: 'month', spec: 'month' }
  const match = DURATION.exec(spec)
  if (match === null) return null
  const unit = match[2] as keyof typeof UNIT_MS
  const durationMs = Number(match[1]) * UNIT_MS[unit]
  if (!Number.isSafeInteger(durationMs)) return null
  return { kind: 'fixed', spec: canonicalSpec(durationMs), durationMs }
}

function canonicalSpec (durationMs: number): string {
  if (durationMs % DAY_MS === 0) return `${durationMs / DAY_MS}d`
  if (durationMs % HOUR_MS === 0) return `${durationMs / HOUR_MS}h`
  if (durationMs % MINUTE_MS === 0) return `${durationMs / MINUTE_MS}m`
  return `${durationMs / SECOND_MS}s`
}

/**
 * The last bounds computed for each window: every dispatch asks for the window of now, which
 * changes once a window, so the date arithmetic and the id's formatting run once a window.
 */
const lastBounds = new WeakMap<QuotaWindow, WindowBounds>()

/** The window that contains `nowMs`. */
export function currentWindow (window: QuotaWindow, nowMs: number): WindowBounds {
  const last = lastBounds.get(window)
  if (last !== undefined && nowMs >= last.startMs && nowMs < last.resetMs) return last
  const bounds = computeWindow(window, nowMs)
  lastBounds.set(window, bounds)
  return bounds
}

function computeWindow (window: QuotaWindow, nowMs: number): WindowBounds {
  const now = new Date(nowMs)
  // Outside the Date range there is no calendar to align to (and toISOString would throw).
  if (Number.isNaN(now.getTime())) throw new RangeError(`nowMs is not a valid time: ${nowMs}`)
  if (window.kind === 'month') {
    const year = now.getUTCFullYear()
    const month = now.getUTCMonth()
    // Date.UTC carries month 12 into January of the next year.
    return {
      id: `${String(year).padStart(4, '0')}-${String(month + 1).padStart(2, '0')}`,
      startMs: Date.UTC(year, month, 1),
      resetMs: Date.UTC(year, month + 1, 1)
    }
  }
  const startMs = Math.floor(nowMs / window.durationMs) * window.durationMs
  // The spec is part of the id so that, say, an hourly and a daily limit on the same scope
  // never share a counter; the start is printed to the second, the finest unit a spec has.
  return {
    id: `${window.spec}@${new Date(startMs).toISOString().slice(0, 19)}Z`,
    startMs,
    resetMs: startMs + window.durationMs
  }
}
