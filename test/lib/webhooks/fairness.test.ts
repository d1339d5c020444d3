/*
 * One tenant's endpoints cannot starve another's: a tenant with 20 endpoints that accept the
 * connection and never answer, thousands of deliveries queued for them and attempts that wait
 * a minute for an answer, while a calm tenant's event must still arrive within seconds. Real
 * sockets for every attempt; the memory queue and a real redis-server.
 */
import t, { type Test } from 'tap'
import type { WebhookEndpoint } from '../../../lib/tenants/tenant.js'
import { AddressPolicy } from '../../../lib/webhooks/address-policy.js'
import { MemoryWebhookQueue } from '../../../lib/state/memory/webhook-queue.js'
import type { Delivery, WebhookQueue } from '../../../lib/state/webhook-queue.js'
import { RedisWebhookQueue } from '../../../lib/state/redis/webhook-queue.js'
import { sendWebhook } from '../../../lib/webhooks/sender.js'
import { WebhookWorker } from '../../../lib/webhooks/worker.js'
import { redisTestOptions, redisWithClients } from '../../support/redis.js'
import { startHangingEndpoints, startReceiver, webhookSecret } from '../../support/webhook-receiver.js'

/** Starved, a calm event would wait for the hanging attempts' minute: half of it, so no machine's speed decides. */
const CALM_WITHIN_MS = 30_000
const PER_TENANT_IN_FLIGHT = 8
const PER_TENANT_QUEUED = 1000
const NOISY_EVENTS = 250
const NOISY_ENDPOINTS = 20

const secret = webhookSecret()
const policy = new AddressPolicy({ allowLoopback: true, allowedNetworks: null })
const silent = { info () {}, warn () {}, error () {} }
const events = new Set(['verification.failed', 'verification.succeeded'] as const)

function event (tenant: string, messageId: string, url: string): Delivery {
  return { messageId, tenant, url, type: tenant === 'calm' ? 'verification.succeeded' : 'verification.failed', body: `{"type":"x","id":"${messageId}"}`, createdAtMs: Date.now(), attempts: 0 }
}

async function starvationSuite (t: Test, makeQueue: () => Promise<WebhookQueue>, bounded: (t: Test) => Promise<void>): Promise<void> {
  const hanging = await startHangingEndpoints(t, NOISY_ENDPOINTS)
  const calm = await startReceiver(t, secret)
  const endpoints = new Map<string, WebhookEndpoint>([
    ...hanging.urls.map((url): [string, WebhookEndpoint] => [url, { url, secret, events }]),
    [calm.url, { url: calm.url, secret, events }]
  ])
  const queue = await makeQueue()
  let overflowed = 0
  for (let i = 0; i < NOISY_EVENTS; i++) {
    overflowed += (await queue.enqueue(hanging.urls.map((url) => event('noisy', `noisy-${i}`, url)))).overflowed
  }
  t.equal(overflowed, NOISY_EVENTS * NOISY_ENDPOINTS - PER_TENANT_QUEUED, 'past its cap, the noisy tenant\'s own oldest deliveries went to its dead letters')
  const noisyDead = await queue.deadLetters('noisy', PER_TENANT_QUEUED + 1)
  t.equal(noisyDead.length, PER_TENANT_QUEUED, 'as many as its cap are kept')
  t.ok(noisyDead.every((letter) => letter.reason === 'overflow' && letter.delivery.tenant === 'noisy'), 'all of them the noisy tenant\'s, as overflow')

  const worker = new WebhookWorker({
    queue,
    endpoint: (_tenant, url) => endpoints.get(url) ?? null,
    active: () => true,
    send: async (target, delivery, signal) => await sendWebhook(target, delivery, { policy, timeoutMs: 60_000, userAgent: 'test' }, signal),
    schedule: { baseMs: 1000, maxDelayMs: 1000, forMs: 3_600_000 },
    perEndpoint: 4,
    perTenant: PER_TENANT_IN_FLIGHT,
    maxInFlight: 64,
    pollMs: 1000,
    stuckMs: 90_000,
    log: silent
  })
  t.teardown(async () => { await worker.close() })
  worker.start()
  await calm.waitFor(() => hanging.open >= PER_TENANT_IN_FLIGHT, `${PER_TENANT_IN_FLIGHT} hanging attempts`)

  const latencies: number[] = []
  for (let i = 0; i < 5; i++) {
    const queuedAt = Date.now()
    t.same(await queue.enqueue([event('calm', `calm-${i}`, calm.url)]), { queued: true, overflowed: 0 })
    worker.wake()
    await calm.waitFor(() => calm.verified.some((received) => received.payload.id === `calm-${i}`), `calm event ${i}`, 60_000)
    latencies.push(Date.now() - queuedAt)
  }
  t.ok(Math.max(...latencies) < CALM_WITHIN_MS, `every calm event delivered within ${CALM_WITHIN_MS} ms (${latencies.join(', ')} ms)`)
  t.ok(hanging.peak <= PER_TENANT_IN_FLIGHT, `the noisy tenant never held more than ${PER_TENANT_IN_FLIGHT} attempts (peak ${hanging.peak})`)
  t.same(await queue.deadLetters('calm', 10), [], 'the calm tenant lost nothing')
  await bounded(t)
}

t.test('memory', async (t) => {
  await starvationSuite(t, async () => new MemoryWebhookQueue({ perTenant: PER_TENANT_QUEUED }), async () => {})
})

t.test('redis', redisTestOptions(), async (t) => {
  const { client } = await redisWithClients(t)
  await starvationSuite(t, async () => new RedisWebhookQueue(client, { perTenant: PER_TENANT_QUEUED }), async (t) => {
    const [stream, retries, dead] = await Promise.all([client.xlen('webhooks:{webhooks:noisy}:stream'), client.zcard('webhooks:{webhooks:noisy}:retry'), client.xlen('webhooks:{webhooks:noisy}:dead')])
    t.ok(stream + retries <= PER_TENANT_QUEUED, `the noisy tenant's queue in Redis stays within its cap (stream ${stream} + retries ${retries})`)
    t.ok(dead <= PER_TENANT_QUEUED, `and its dead letters (${dead})`)
  })
})
