import t from 'tap'
import { currentWindow, parseWindow, type QuotaWindow } from '../../../lib/limits/window.js'

function window (spec: string): QuotaWindow {
  const parsed = parseWindow(spec)
  if (parsed === null) throw new Error(`test setup: ${spec} should parse`)
  return parsed
}

t.test('parseWindow accepts durations and month', async (t) => {
  t.strictSame(parseWindow('1h'), { kind: 'fixed', spec: '1h', durationMs: 3_600_000 })
  t.strictSame(parseWindow('1d'), { kind: 'fixed', spec: '1d', durationMs: 86_400_000 })
  t.strictSame(parseWindow('30d'), { kind: 'fixed', spec: '30d', durationMs: 30 * 86_400_000 })
  t.strictSame(parseWindow('15m'), { kind: 'fixed', spec: '15m', durationMs: 900_000 })
  t.strictSame(parseWindow('month'), { kind: 'month', spec: 'month' })
})

t.test('parseWindow normalises equivalent durations to one spec', async (t) => {
  t.strictSame(parseWindow('60m'), { kind: 'fixed', spec: '1h', durationMs: 3_600_000 })
  t.strictSame(parseWindow('1440m'), { kind: 'fixed', spec: '1d', durationMs: 86_400_000 })
  t.strictSame(parseWindow('48h'), { kind: 'fixed', spec: '2d', durationMs: 2 * 86_400_000 })
  t.strictSame(parseWindow('90m'), { kind: 'fixed', spec: '90m', durationMs: 5_400_000 })
})

t.test('parseWindow rejects anything else', async (t) => {
  for (const spec of ['', '0h', '01h', '-1h', '1.5h', '1w', 'h', '1 h', ' 1h', '1H', 'Month', 'months', '99999999999999999d']) {
    t.equal(parseWindow(spec), null, JSON.stringify(spec))
  }
})

t.test('fixed windows are aligned to the Unix epoch', async (t) => {
  const hour = window('1h')
  const now = Date.UTC(2026, 10, 3, 14, 37, 12, 345)
  t.strictSame(currentWindow(hour, now), {
    id: '1h@2026-11-03T14:00:00Z',
    startMs: Date.UTC(2026, 10, 3, 14),
    resetMs: Date.UTC(2026, 10, 3, 15)
  })
  t.strictSame(currentWindow(window('1d'), now), {
    id: '1d@2026-11-03T00:00:00Z',
    startMs: Date.UTC(2026, 10, 3),
    resetMs: Date.UTC(2026, 10, 4)
  })
  // 30-day windows count from the epoch, not from the start of a month.
  const thirty = currentWindow(window('30d'), now)
  t.equal(thirty.startMs % (30 * 86_400_000), 0)
  t.ok(thirty.startMs <= now && now < thirty.resetMs)
  t.equal(thirty.resetMs - thirty.startMs, 30 * 86_400_000)
})

t.test('a fixed window includes its start and excludes its reset', async (t) => {
  const minute = window('1m')
  const start = Date.UTC(2026, 0, 1, 0, 5)
  t.equal(currentWindow(minute, start).startMs, start)
  t.equal(currentWindow(minute, start + 59_999).startMs, start)
  t.equal(currentWindow(minute, start + 60_000).startMs, start + 60_000)
  t.not(currentWindow(minute, start + 59_999).id, currentWindow(minute, start + 60_000).id)
  t.equal(currentWindow(minute, start - 1).resetMs, start)
})

t.test('windows with different specs never share an id', async (t) => {
  const now = Date.UTC(2026, 0, 1)
  const ids = ['1m', '1h', '1d', '30d', 'month'].map((spec) => currentWindow(window(spec), now).id)
  t.equal(new Set(ids).size, ids.length, ids.join(' '))
})

t.test('month windows follow the UTC calendar', async (t) => {
  const month = window('month')
  t.strictSame(currentWindow(month, Date.UTC(2026, 10, 17, 9, 30)), {
    id: '2026-11',
    startMs: Date.UTC(2026, 10, 1),
    resetMs: Date.UTC(2026, 11, 1)
  })
  t.equal(currentWindow(month, Date.UTC(2026, 10, 1)).id, '2026-11', 'first millisecond belongs to the month')
  t.equal(currentWindow(month, Date.UTC(2026, 10, 1) - 1).id, '2026-10', 'last millisecond belongs to the previous month')
})

t.test('month rolls over from December to January', async (t) => {
  const month = window('month')
  const december = currentWindow(month, Date.UTC(2026, 11, 31, 23, 59, 59, 999))
  t.strictSame(december, { id: '2026-12', startMs: Date.UTC(2026, 11, 1), resetMs: Date.UTC(2027, 0, 1) })
  const january = currentWindow(month, december.resetMs)
  t.strictSame(january, { id: '2027-01', startMs: Date.UTC(2027, 0, 1), resetMs: Date.UTC(2027, 1, 1) })
})

t.test('February has 29 days in leap years and 28 otherwise', async (t) => {
  const month = window('month')
  const dayMs = 86_400_000
  const leap = currentWindow(month, Date.UTC(2028, 1, 29, 12))
  t.strictSame(leap, { id: '2028-02', startMs: Date.UTC(2028, 1, 1), resetMs: Date.UTC(2028, 2, 1) })
  t.equal(leap.resetMs - leap.startMs, 29 * dayMs)
  const common = currentWindow(month, Date.UTC(2027, 1, 28, 23, 59))
  t.equal(common.resetMs - common.startMs, 28 * dayMs)
  t.equal(currentWindow(month, Date.UTC(2027, 2, 1)).id, '2027-03')
  // 2100 is divisible by 4 but not a leap year.
  const century = currentWindow(month, Date.UTC(2100, 1, 15))
  t.equal(century.resetMs - century.startMs, 28 * dayMs)
})

t.test('currentWindow rejects times outside the calendar', async (t) => {
  t.throws(() => currentWindow(window('1h'), Number.NaN), RangeError)
  t.throws(() => currentWindow(window('month'), Number.POSITIVE_INFINITY), RangeError)
  t.throws(() => currentWindow(window('1d'), 9e15), RangeError)
})

t.test('second windows, for short sandbox tiers and tests', async (t) => {
  const spec = parseWindow('10s')
  t.same(spec, { kind: 'fixed', spec: '10s', durationMs: 10_000 })
  t.equal(parseWindow('120s')?.spec, '2m', 'normalised to the largest whole unit')
  const bounds = currentWindow(spec!, Date.UTC(2026, 0, 1, 0, 0, 25))
  t.equal(bounds.startMs, Date.UTC(2026, 0, 1, 0, 0, 20))
  t.equal(bounds.resetMs, Date.UTC(2026, 0, 1, 0, 0, 30))
})
