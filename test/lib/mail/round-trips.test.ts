import t from 'tap'
import { Writable } from 'node:stream'
import { FAILURE_FRESH_MS, FAILURES_KEPT, RoundTrips, SENDS_KEPT } from '../../../lib/mail/round-trips.js'
import { Mailer } from '../../../lib/mail/mailer.js'
import { parseConfig } from '../../../lib/config/from-env.js'
import { MemorySandboxInbox } from '../../../lib/state/memory/sandbox-inbox.js'
import type { OutgoingMessage } from '../../../lib/mail/transport.js'
import { startSmtp } from '../../support/mail-peers.js'

/** Round trips on a clock the test moves, drawing the index it is told, and recording each wait instead of waiting. */
function drivenRoundTrips (): { roundTrips: RoundTrips, waits: number[], clock: { now: number }, picks: number[] } {
  const clock = { now: 0 }
  const waits: number[] = []
  const picks: number[] = []
  const roundTrips = new RoundTrips({
    now: () => clock.now,
    pick: (count) => picks.shift() ?? count - 1,
    wait: async (ms) => { waits.push(ms) }
  })
  return { roundTrips, waits, clock, picks }
}

/** Every duration a draw can give, by drawing each index in turn. */
function drawable (roundTrips: RoundTrips, tenantId: string, picks: number[]): number[] {
  const seen: number[] = []
  for (let index = 0; index < SENDS_KEPT; index++) {
    picks.push(index)
    const drawn = roundTrips.draw(tenantId)
    picks.length = 0
    if (drawn === null) break
    if (!seen.includes(drawn)) seen.push(drawn)
  }
  return seen.sort((a, b) => a - b)
}

t.test('a tenant with no live send yet has nothing to imitate: no wait', async (t) => {
  const { roundTrips, waits } = drivenRoundTrips()
  t.equal(roundTrips.draw('acme'), null)
  await roundTrips.imitate('acme')
  t.strictSame(waits, [])
})

t.test('the wait is a round trip drawn from the tenant\'s own sends', async (t) => {
  const { roundTrips, waits, picks } = drivenRoundTrips()
  for (const ms of [12, 30, 18]) roundTrips.record('acme', ms, false)
  roundTrips.record('globex', 4000, false)
  picks.push(1)
  await roundTrips.imitate('acme')
  t.strictSame(waits, [30], 'the drawn sample, waited for whole')
  t.strictSame(drawable(roundTrips, 'acme', picks), [12, 18, 30], 'every draw is one of its sends')
  t.strictSame(drawable(roundTrips, 'globex', picks), [4000], 'and never another tenant\'s')
})

t.test('fresh failures are what a failure is imitated by; once stale, the tenant\'s sends again', async (t) => {
  const { roundTrips, clock, picks } = drivenRoundTrips()
  for (let i = 0; i < 10; i++) roundTrips.record('acme', 40, false)
  roundTrips.record('acme', 9, true)
  t.strictSame(drawable(roundTrips, 'acme', picks), [9], 'a refusal came sooner than an acceptance: the refusal is drawn')
  for (let i = 0; i < SENDS_KEPT * 2; i++) roundTrips.record('acme', 40, false)
  t.strictSame(drawable(roundTrips, 'acme', picks), [9], 'kept apart: a run of sent mail does not push it out')
  clock.now += FAILURE_FRESH_MS + 1
  t.strictSame(drawable(roundTrips, 'acme', picks), [40], `after ${FAILURE_FRESH_MS / 60_000} minutes it no longer stands for what a failure takes now`)
  roundTrips.record('acme', 5000, true)
  t.strictSame(drawable(roundTrips, 'acme', picks), [5000], 'a provider that times out now makes the wait a timeout')
})

t.test('bounded: the last sends and failures only', async (t) => {
  const { roundTrips, picks } = drivenRoundTrips()
  for (let ms = 1; ms <= SENDS_KEPT + 10; ms++) roundTrips.record('acme', ms, false)
  t.strictSame(drawable(roundTrips, 'acme', picks), Array.from({ length: SENDS_KEPT }, (_, i) => i + 11), `the last ${SENDS_KEPT} sends`)
  for (let ms = 1; ms <= FAILURES_KEPT + 3; ms++) roundTrips.record('acme', 1000 + ms, true)
  t.strictSame(drawable(roundTrips, 'acme', picks), Array.from({ length: FAILURES_KEPT }, (_, i) => 1004 + i), `the last ${FAILURES_KEPT} failures`)
})

t.test('the mailer records each live send through its providers, and a withheld send waits for one of them', async (t) => {
  const refused = new Set(['gone@example.com'])
  const peer = await startSmtp(t, {
    onRcptTo (address, _session, callback) {
      callback(refused.has(address.address) ? Object.assign(new Error('no such user'), { responseCode: 550 }) : undefined)
    }
  })
  const config = parseConfig({ MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${peer.port}?tls=off`, MAIL_FROM: 'codes@otp.test' })
  const { roundTrips, waits, picks } = drivenRoundTrips()
  const mailer = new Mailer(config, new MemorySandboxInbox(), new Writable({ write (_chunk, _encoding, done) { done() } }), undefined, undefined, roundTrips)
  t.teardown(async () => { await mailer.close() })
  const message = (to: string): OutgoingMessage => ({ to, from: 'codes@otp.test', subject: 'Your code', text: '123456', html: '<p>123456</p>', tags: {} })
  const context = { mode: 'live' as const, tenantId: 'acme', requestId: 'otp_1', code: '123456' }

  await mailer.withhold({ mode: 'live', tenantId: 'acme' })
  t.strictSame(waits, [], 'before any send, nothing to wait for')
  await mailer.send(message('ada@example.com'), context)
  await t.rejects(mailer.send(message('gone@example.com'), context), { name: 'DeliveryError', message: /\(rejected\)/ }, 'the relay refuses the recipient')
  const drawn = drawable(roundTrips, 'acme', picks)
  t.equal(drawn.length, 1, 'the fresh refusal alone is what a withheld send imitates')
  const refusalMs = drawn[0] ?? 0
  t.ok(refusalMs > 0, 'the refusal took the provider\'s time')
  await mailer.withhold({ mode: 'live', tenantId: 'acme' })
  t.strictSame(waits, [refusalMs], 'a withheld live send waits for it')
  await mailer.withhold({ mode: 'test', tenantId: 'acme' })
  t.strictSame(waits, [refusalMs], 'a withheld sandbox send waits for nothing, as the simulator\'s rejection does')
})
