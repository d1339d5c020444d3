import t from 'tap'
import { Writable } from 'node:stream'
import { RoundTrips, SENDS_KEPT } from '../../../../lib/mail/delivery/round-trips.js'
import { Mailer } from '../../../../lib/mail/delivery/mailer.js'
import { parseConfig } from '../../../../lib/config/from-env.js'
import { MemorySandboxInbox } from '../../../../lib/state/memory/sandbox-inbox.js'
import type { OutgoingMessage } from '../../../../lib/mail/delivery/transport.js'
import { startSmtp } from '../../../support/mail-peers.js'

/** Round trips drawing the index they are told, and recording each wait instead of waiting. */
function drivenRoundTrips (): { roundTrips: RoundTrips, waits: number[], picks: number[] } {
  const waits: number[] = []
  const picks: number[] = []
  const roundTrips = new RoundTrips({
    pick: (count) => picks.shift() ?? count - 1,
    wait: async (ms) => { waits.push(ms) }
  })
  return { roundTrips, waits, picks }
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

t.test('a process that has sent no live mail yet has nothing to imitate: no wait', async (t) => {
  const { roundTrips, waits } = drivenRoundTrips()
  t.equal(roundTrips.draw('acme'), null)
  await roundTrips.imitate('acme')
  t.strictSame(waits, [])
})

t.test('the wait is a round trip drawn from the tenant\'s own accepted sends', async (t) => {
  const { roundTrips, waits, picks } = drivenRoundTrips()
  for (const ms of [12, 30, 18]) roundTrips.record('acme', ms, true)
  roundTrips.record('globex', 4000, true)
  picks.push(1)
  await roundTrips.imitate('acme')
  t.strictSame(waits, [30], 'the drawn sample, waited for whole')
  t.strictSame(drawable(roundTrips, 'acme', picks), [12, 18, 30], 'every draw is one of its sends')
  t.strictSame(drawable(roundTrips, 'globex', picks), [4000], 'and never another tenant\'s')
})

t.test('a tenant with no accepted send yet draws from every tenant\'s', async (t) => {
  const { roundTrips, picks } = drivenRoundTrips()
  roundTrips.record('acme', 25, true)
  roundTrips.record('globex', 40, true)
  t.strictSame(drawable(roundTrips, 'initech', picks), [25, 40])
})

t.test('a process with no accepted send draws from its sends of any outcome; a refusal never joins a tenant\'s', async (t) => {
  const { roundTrips, picks } = drivenRoundTrips()
  roundTrips.record('acme', 90, false)
  t.strictSame(drawable(roundTrips, 'acme', picks), [90], 'refusals only: they are what a send takes here')
  roundTrips.record('globex', 300, true)
  t.strictSame(drawable(roundTrips, 'acme', picks), [300], 'once a send is accepted anywhere, only accepted ones')
  roundTrips.record('acme', 250, true)
  roundTrips.record('acme', 5, false)
  t.strictSame(drawable(roundTrips, 'acme', picks), [250], 'the tenant\'s own accepted sends, its quick refusal not among them')
})

t.test('a withheld send waits the longer of an accepted send and a refusal, as a refused one does', async (t) => {
  const { roundTrips, waits } = drivenRoundTrips()
  roundTrips.record('acme', 100, true)
  roundTrips.record('acme', 150, false)
  await roundTrips.imitate('acme')
  roundTrips.record('globex', 100, true)
  roundTrips.record('globex', 20, false)
  await roundTrips.imitate('globex')
  t.strictSame(waits, [150, 100])
})

t.test('what a refused send already took is not waited again', async (t) => {
  const { roundTrips, waits, picks } = drivenRoundTrips()
  roundTrips.record('acme', 300, true)
  picks.push(0)
  await roundTrips.imitate('acme', 120)
  t.strictSame(waits, [180], 'a refusal after 120 ms waits the rest of a 300 ms accepted send')
  picks.push(0)
  await roundTrips.imitate('acme', 450)
  t.strictSame(waits, [180], 'one that took longer than the draw waits nothing more')
})

t.test('bounded: the last sends only', async (t) => {
  const { roundTrips, picks } = drivenRoundTrips()
  for (let ms = 1; ms <= SENDS_KEPT + 10; ms++) roundTrips.record('acme', ms, true)
  t.strictSame(drawable(roundTrips, 'acme', picks), Array.from({ length: SENDS_KEPT }, (_, i) => i + 11), `the last ${SENDS_KEPT} sends`)
})

t.test('the mailer records each accepted live send through its providers, never a refused one, and a withheld send waits for one of them', async (t) => {
  const refused = new Set(['gone@example.com'])
  const peer = await startSmtp(t, {
    onRcptTo (address, _session, callback) {
      callback(refused.has(address.address) ? Object.assign(new Error('no such user'), { responseCode: 550 }) : undefined)
    }
  })
  const config = parseConfig({ MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${peer.port}?tls=off`, MAIL_FROM: 'codes@otp.test' })
  const { roundTrips, waits, picks } = drivenRoundTrips()
  const mailer = new Mailer(config, { sandboxInbox: new MemorySandboxInbox(), logOutput: new Writable({ write (_chunk, _encoding, done) { done() } }), roundTrips })
  t.teardown(async () => { await mailer.close() })
  const message = (to: string): OutgoingMessage => ({ to, from: 'codes@otp.test', subject: 'Your code', text: '123456', html: '<p>123456</p>', tags: {} })
  const context = { mode: 'live' as const, tenantId: 'acme', requestId: 'otp_1', code: '123456' }

  await mailer.withhold({ mode: 'live', tenantId: 'acme' })
  t.strictSame(waits, [], 'before any send, nothing to wait for')
  await mailer.send(message('ada@example.com'), context)
  await t.rejects(mailer.send(message('gone@example.com'), context), { name: 'DeliveryError', message: /\(rejected\)/ }, 'the relay refuses the recipient')
  const drawn = drawable(roundTrips, 'acme', picks)
  t.equal(drawn.length, 1, 'the accepted send alone is what an accepted send takes')
  const acceptedMs = drawn[0] ?? 0
  const refusalMs = roundTrips.drawRefusal('acme') ?? 0
  t.ok(acceptedMs > 0 && refusalMs > 0, 'each took the provider\'s time, kept apart')
  await mailer.withhold({ mode: 'live', tenantId: 'acme' })
  t.strictSame(waits, [Math.max(acceptedMs, refusalMs)], 'a withheld live send waits the longer of the two')
  await mailer.withhold({ mode: 'test', tenantId: 'acme' })
  t.strictSame(waits, [Math.max(acceptedMs, refusalMs)], 'a withheld sandbox send waits for nothing, as the simulator\'s rejection does')
})
