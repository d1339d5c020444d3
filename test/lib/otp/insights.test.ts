import t from 'tap'
import { funnelOf, histogramQuantile, InsightsReports, parseDateTime } from '../../../lib/otp/insights.js'
import { SANDBOX_MODE } from '../../../lib/keys/api-keys.js'
import { MemoryInsights } from '../../../lib/state/memory/insights.js'
import { DURATION_BOUNDS_SECONDS } from '../../../lib/state/insights.js'

const HOUR = 3_600_000
const DAY = 86_400_000

/** Bins with `n` durations in the bin of upper bound `bound` (seconds, or 'inf'). */
function binsWith (entries: Array<[number | 'inf', number]>): number[] {
  const bins = Array<number>(DURATION_BOUNDS_SECONDS.length + 1).fill(0)
  for (const [bound, n] of entries) bins[bound === 'inf' ? DURATION_BOUNDS_SECONDS.length : DURATION_BOUNDS_SECONDS.indexOf(bound)] = n
  return bins
}

t.test('quantiles as histogram_quantile estimates them: linear inside the bin, from 0 in the first', async (t) => {
  t.equal(histogramQuantile(0.5, binsWith([[1, 2]])), 0.5, 'the middle of the first bin')
  t.equal(histogramQuantile(0.5, binsWith([[10, 4]])), 7.5, 'inside (5, 10]: the rank 2 of 4 is half-way')
  t.equal(histogramQuantile(0.9, binsWith([[10, 5], [30, 5]])), 28, '(20, 30]: rank 9 is the 4th of its 5')
  t.equal(histogramQuantile(0.5, binsWith([[2, 1], [3600, 1]])), 2, 'a rank at the end of a bin is its bound')
  t.equal(histogramQuantile(0.9, binsWith([[60, 1], ['inf', 9]])), 3600, 'past the last bound: the last bound')
})

t.test('RFC 3339 date-times, and nothing else', async (t) => {
  t.equal(parseDateTime('2026-11-28T10:00:00Z'), Date.UTC(2026, 10, 28, 10))
  t.equal(parseDateTime('2026-11-28t10:00:00.5z'), Date.UTC(2026, 10, 28, 10, 0, 0, 500))
  t.equal(parseDateTime('2026-11-28T10:00:00.123456789+05:30'), Date.UTC(2026, 10, 28, 4, 30, 0, 123))
  t.equal(parseDateTime('2026-11-28T00:00:00-01:00'), Date.UTC(2026, 10, 28, 1))
  t.equal(parseDateTime('0000-01-01T00:00:00Z'), new Date('0000-01-01T00:00:00Z').getTime(), 'year 0 is year 0, not 1900')
  for (const text of ['', '2026-11-28', '2026-11-28 10:00:00Z', '2026-11-28T10:00:00', '2026-13-01T00:00:00Z', '2026-02-29T00:00:00Z',
    '0000-00-00T00:00:00Z', '2026-01-01T24:00:00Z', '2026-01-01T00:60:00Z', '2026-01-01T00:00:60Z', '2026-01-01T00:00:00+24:00',
    '+275760-09-13T00:00:00Z', '275760-09-13T00:00:00Z', '1e308', '99999999999999999999', '2026-01-01T00:00:00.1234567890Z', ' 2026-01-01T00:00:00Z']) {
    t.equal(parseDateTime(text), null, JSON.stringify(text))
  }
})

t.test('a funnel from counters: every field present, conversion from the timed verifications', async (t) => {
  const funnel = funnelOf({ requested: 4, sent: 4, verified: 3, 'ttv:10': 2, 'delivery_failed:rejected': 1, 'delivery_failed:new_reason': 2, 'refused:429': 7 })
  t.match(funnel, { requested: 4, sent: 4, verified: 3, conversion: 0.5, timeToVerify: { p50: 7.5, p90: 9.5, count: 2 }, timeToDelivery: null, refused: { 402: 0, 403: 0, 429: 7 } })
  t.match(funnel.deliveryFailed, { rejected: 1, unknown: 2, timeout: 0 }, "a reason this version does not know is `unknown`'s")
  t.equal(funnelOf({}).conversion, null, 'nothing sent: no conversion')
})

t.test('a report: the buckets of the range, clamped to retention, bounded', async (t) => {
  const now = Date.UTC(2026, 10, 28, 10, 30)
  const store = new MemoryInsights({ retentionMs: 10 * DAY }, { now: () => now })
  store.count('acme', 'live', now - 2 * HOUR, ['requested', 'sent', 'verified', 'ttv:5'])
  store.count('acme', 'live', now, ['requested', 'sent'])
  const reports = new InsightsReports(store, { retentionMs: 10 * DAY })
  const hours = await reports.report('acme', 'live', { granularity: 'hour', from: '2026-11-28T07:59:59Z' }, now)
  t.same(hours.buckets.map((bucket) => [bucket.start, bucket.requested]), [
    ['2026-11-28T07:00:00.000Z', 0], ['2026-11-28T08:00:00.000Z', 1], ['2026-11-28T09:00:00.000Z', 0], ['2026-11-28T10:00:00.000Z', 1]
  ])
  t.match(hours, { from: '2026-11-28T07:00:00.000Z', to: '2026-11-28T11:00:00.000Z', dataStart: '2026-11-18T11:00:00.000Z', totals: { requested: 2, sent: 2, conversion: 0.5, timeToVerify: { count: 1 } } })
  const days = await reports.report('acme', 'live', { from: '2026-01-01T00:00:00Z' }, now)
  t.equal(days.from, '2026-11-19T00:00:00.000Z', 'clamped to the first day within retention')
  t.equal(days.buckets.length, 10)
  const exact = await reports.report('acme', 'live', { granularity: 'hour', from: '2026-11-28T08:00:00Z', to: '2026-11-28T10:00:00Z' }, now)
  t.same(exact.buckets.map((bucket) => bucket.start), ['2026-11-28T08:00:00.000Z', '2026-11-28T09:00:00.000Z'], '`to` on a bucket\'s start ends the range before it')
  await t.rejects(reports.report('acme', 'live', { granularity: 'hour', from: '2026-11-20T00:00:00Z' }, now), { code: 'INSIGHTS_RANGE_TOO_LONG' })
  await t.rejects(reports.report('acme', 'live', { to: '2026-11-18T11:00:00Z' }, now), { code: 'INSIGHTS_RANGE_INVALID' }, 'ends before the first day kept: nothing to tell')
  await t.rejects(reports.report('acme', 'live', { to: '2026-12-09T00:00:00Z' }, now), { code: 'INSIGHTS_RANGE_INVALID' }, 'further ahead than retention')
})

t.test('one report at a time per tenant: another ask meanwhile is a 429 at once, another tenant\'s is answered', async (t) => {
  const now = Date.UTC(2026, 10, 28, 10, 30)
  const store = new MemoryInsights({ retentionMs: 10 * DAY }, { now: () => now })
  let release = (): void => {}
  const held = new Promise<void>((resolve) => { release = resolve })
  // The store's own read, held until the test lets it go: the first report is still being made.
  const holding = { read: async (...args: Parameters<MemoryInsights['read']>) => { await held; return await store.read(...args) } }
  const reports = new InsightsReports(holding, { retentionMs: 10 * DAY })
  const first = reports.report('acme', 'live', {}, now)
  await t.rejects(reports.report('acme', SANDBOX_MODE, {}, now), { code: 'RATE_LIMITED', headers: { 'retry-after': '1' } }, 'the same tenant, even in its other mode')
  const other = reports.report('globex', 'live', {}, now)
  release()
  t.equal((await first).buckets.length, 10)
  t.equal((await other).buckets.length, 10, "another tenant's report was made meanwhile")
  t.equal((await reports.report('acme', 'live', {}, now)).buckets.length, 10, 'once done, the tenant asks again')
})
