const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const

export type DurationUnit = keyof typeof UNIT_MS

const DURATION = /^([0-9]{1,12})(ms|s|m|h|d)?$/

/**
 * Milliseconds of `spec` (`500ms`, `5s`, `15m`, `24h`, `30d`; a plain number counts in
 * `plainUnit`), or null when it is not a duration, or a plain number where no unit is implied.
 */
export function parseDuration (spec: string, plainUnit: DurationUnit | null): number | null {
  const match = DURATION.exec(spec)
  if (match === null) return null
  const unit = (match[2] as DurationUnit | undefined) ?? plainUnit
  if (unit === null) return null
  return Number(match[1]) * UNIT_MS[unit]
}
