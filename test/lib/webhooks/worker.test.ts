import t from 'tap'
import type { WebhookEndpoint } from '../../../lib/tenants/tenant.js'
import { AddressPolicy } from '../../../lib/webhooks/address-policy.js'
import { MemoryWebhookQueue } from '../../../lib/state/memory/webhook-queue.js'
import type { Delivery } from '../../../lib/state/webhook-queue.js'
import { sendWebhook } from '../../../lib/webhooks/sender.js'
import { WebhookWorker, type AttemptOutcome, type WorkerOptions } from '../../../lib/webhooks/worker.js'
import { startReceiver, webhookSecret } from '../../support/webhook-receiver.js'
import { until } from '../../support/wait.js'

const secret = webhookSecret()
const policy = new AddressPolicy({ allowLoopback: true, allowedNetworks: null })
const silent = { info () {}, warn () {}, error () {} }

function delivery (url: string, messageId = 'msg_w1'): Delivery {
  return { messageId, tenant: 'acme', url, type: 'verification.succeeded', body: '{"type":"verification.succeeded"}', createdAtMs: Date.now(), attempts: 0 }
}

function worker (queue: MemoryWebhookQueue, endpoint: WebhookEndpoint | null, overrides: Partial<WorkerOptions> = {}): { worker: WebhookWorker, outcomes: AttemptOutcome[] } {
  const outcomes: AttemptOutcome[] = []
  const instance = new WebhookWorker({
    queue,
    endpoint: () => endpoint,
    active: () => true,
    send: async (target, item, signal) => await sendWebhook(target, item, { policy, timeoutMs: 60_000, userAgent: 'test' }, signal),
    schedule: { baseMs: 50, maxDelayMs: 100, forMs: 60_000 },
    perEndpoint: 4,
    perTenant: 8,
    maxInFlight: 16,
    pollMs: 50,
    stuckMs: 60_000,
    log: silent,
    attempted: (outcome) => { outcomes.push(outcome) },
    ...overrides
  })
  return { worker: instance, outcomes }
}

t.test('shutdown interrupts an attempt and puts the delivery back, no attempt counted', async (t) => {
  // The answer, and the attempt's timeout, a minute away: far from a close that does not wait, on any machine.
  const receiver = await startReceiver(t, secret, () => ({ status: 200, delayMs: 60_000 }))
  const queue = new MemoryWebhookQueue()
  const { worker: running } = worker(queue, { url: receiver.url, secret, events: new Set(['verification.succeeded']) })
  await queue.enqueue([delivery(receiver.url)])
  running.start()
  await receiver.waitFor(() => receiver.attempts === 1, 'the attempt')
  const started = Date.now()
  await running.close()
  t.ok(Date.now() - started < 30_000, `close does not wait for the slow answer (${Date.now() - started} ms)`)
  const [back] = await queue.claim('next', 10, 60_000)
  t.match(back?.delivery, { messageId: 'msg_w1', attempts: 0 })
  t.notOk(back?.delivery.lastError)
})

t.test('a delivery whose endpoint is gone from the tenants file is dropped', async (t) => {
  const queue = new MemoryWebhookQueue()
  const { worker: running, outcomes } = worker(queue, null)
  await queue.enqueue([delivery('https://hooks.acme.test/gone')])
  running.start()
  await until('the delivery handled', () => outcomes.length > 0)
  await running.close()
  t.same(outcomes, ['dropped'])
  t.same(await queue.claim('next', 10, 0), [], 'nothing left to deliver')
})

t.test('while no tenant has an endpoint, the worker leaves the queue alone', async (t) => {
  const queue = new MemoryWebhookQueue()
  const looked = { times: 0 }
  const { worker: running, outcomes } = worker(queue, null, { active: () => { looked.times++; return false } })
  await queue.enqueue([delivery('https://hooks.acme.test/x')])
  running.start()
  // Three polls are the proof that it looked, and each time left the delivery where it was.
  await until('three polls', () => looked.times >= 3)
  await running.close()
  t.same(outcomes, [])
  t.equal((await queue.claim('next', 10, 0)).length, 1)
})
