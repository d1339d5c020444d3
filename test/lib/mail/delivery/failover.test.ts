import t from 'tap'
import { CircuitBreaker, FailoverTransport } from '../../../../lib/mail/delivery/failover.js'
import { DeliveryError, type DeliveryFailureKind, type MailTransport, type OutgoingMessage } from '../../../../lib/mail/delivery/transport.js'

const message: OutgoingMessage = { to: 'a@example.com', from: 'b@example.com', subject: 's', text: 't', html: 'h', tags: {} }

/** A provider whose next answers are scripted: null accepts, a kind fails with it. */
function provider (name: string, answers: Array<DeliveryFailureKind | null>): MailTransport & { calls: number } {
  return {
    name,
    calls: 0,
    async send () {
      this.calls++
      const kind = answers.shift() ?? null
      if (kind !== null) throw new DeliveryError(kind, `${name} ${kind}`)
      return `${name}-${this.calls}`
    },
    async ready () { return true },
    async close () {}
  }
}

t.test('breaker: N failures in a row open it; after the open time one probe goes; its outcome decides', async (t) => {
  let now = 0
  const breaker = new CircuitBreaker({ failures: 3, openMs: 1000 }, () => now)
  breaker.failed()
  breaker.failed()
  breaker.succeeded()
  breaker.failed()
  breaker.failed()
  t.equal(breaker.state, 'closed', 'a success in between resets the run')
  breaker.failed()
  t.equal(breaker.state, 'open')
  t.notOk(breaker.admit(), 'open: nothing goes')
  now = 999
  t.notOk(breaker.admit())
  now = 1000
  t.equal(breaker.state, 'half-open')
  t.ok(breaker.admit(), 'half-open: one probe')
  t.notOk(breaker.admit(), 'and only one while it is out')
  breaker.failed()
  t.equal(breaker.state, 'open', 'a failed probe opens it again')
  now = 1999
  t.notOk(breaker.admit(), 'for the whole open time, counted from the probe')
  now = 2000
  t.ok(breaker.admit())
  breaker.succeeded()
  t.equal(breaker.state, 'closed', 'a good probe closes it')
  t.ok(breaker.admit())
})

t.test('failover: skips open circuits, stops at a rejection, reports the last cause', async (t) => {
  let now = 0
  const failedOver: string[] = []
  const skipped: string[] = []
  const primary = provider('ses', ['timeout', 'provider', null, 'rejected'])
  const secondary = provider('smtp', [])
  const mail = new FailoverTransport([primary, secondary], { failures: 2, openMs: 100 }, {
    failedOver (from, kind) { failedOver.push(`${from}:${kind}`) },
    skipped (name) { skipped.push(name) }
  }, () => now)
  t.same(await mail.send(message), { provider: 'smtp', messageId: 'smtp-1' }, 'the provider that took it, with its id of the message')
  t.equal((await mail.send(message)).provider, 'smtp')
  t.same(failedOver, ['ses:timeout', 'ses:provider'])
  t.equal((await mail.send(message)).provider, 'smtp', 'open: straight to the secondary')
  t.same(skipped, ['ses'])
  t.equal(primary.calls, 2)
  now = 100
  t.same(await mail.send(message), { provider: 'ses', messageId: 'ses-3' }, 'half-open probe succeeds')
  t.same(mail.circuits(), { ses: 'closed', smtp: 'closed' })
  await t.rejects(mail.send(message), new DeliveryError('rejected', 'ses rejected'), 'a rejection is final')
  t.equal(secondary.calls, 3, 'the secondary never saw the rejected message')
  t.same(mail.circuits(), { ses: 'closed', smtp: 'closed' }, 'a rejection proves the provider alive')

  const dead = new FailoverTransport([provider('ses', ['connection', 'connection']), provider('smtp', ['timeout', 'timeout'])], { failures: 1, openMs: 100 }, { failedOver () {}, skipped () {} }, () => now)
  await t.rejects(dead.send(message), new DeliveryError('timeout', 'smtp timeout'), 'all failed: the last provider\'s cause')
  await t.rejects(dead.send(message), { name: 'DeliveryError', message: /open circuit/ }, 'all open: fails at once, trying none')
})

t.test('a lone provider has no breaker: every send tries it', async (t) => {
  const only = provider('smtp', ['connection', 'connection', 'connection', null])
  const mail = new FailoverTransport([only], { failures: 1, openMs: 60_000 }, { failedOver () { t.fail('nothing to fail over to') }, skipped () { t.fail('never skipped') } })
  for (let i = 0; i < 3; i++) await t.rejects(mail.send(message), new DeliveryError('connection', 'smtp connection'))
  t.equal((await mail.send(message)).provider, 'smtp')
  t.equal(only.calls, 4)
})
