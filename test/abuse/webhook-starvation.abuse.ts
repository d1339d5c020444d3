/*
 * Starving another tenant's webhooks, against the real server process on a real redis-server:
 * one tenant's 20 endpoints accept the connection and never answer (attempts wait a minute),
 * and it sends thousands of `verification.failed` events through the API, while another
 * tenant's events must still arrive within seconds. Also: the noisy tenant's Redis keys stay
 * within WEBHOOK_MAX_QUEUED_PER_TENANT, its overflow lands in its own dead letters, and it
 * never holds more than WEBHOOK_MAX_IN_FLIGHT_PER_TENANT attempts.
 */
import t from 'tap'
import { Redis } from 'ioredis'
import { TEST_HMAC_KEYS, writeTenants, type FixtureKeys } from '../helper.js'
import { startRedis } from '../support/redis.js'
import { post, startServer, type Running } from '../support/service-process.js'
import { startHangingEndpoints, startReceiver, webhookSecret, type WebhookReceiver } from '../support/webhook-receiver.js'

const NOISY_EVENTS = 300
const NOISY_ENDPOINTS = 20
const CALM_EVENTS = 20
const QUEUE_CAP = 2000
const IN_FLIGHT_CAP = 8
/** The bound for a calm tenant's event, whatever another tenant's endpoints do. */
const CALM_WITHIN_MS = 5000

function percentile (values: number[], fraction: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? Number.NaN
}

const summary = (values: number[]): string => `median ${percentile(values, 0.5)} ms, p99 ${percentile(values, 0.99)} ms, max ${Math.max(...values)} ms`

/** One calm event at a time: from the verify request until the calm endpoint has the event. */
async function calmLatencies (service: Running, keys: FixtureKeys, receiver: WebhookReceiver, label: string): Promise<number[]> {
  const latencies: number[] = []
  for (let i = 0; i < CALM_EVENTS; i++) {
    const email = `${label}${i}@example.com`
    const sent = await post(service.base, '/otp/request', keys.globexTest, { email })
    const inbox = await fetch(`${service.base}/sandbox/messages?email=${email}`, { headers: { authorization: `Bearer ${keys.globexTest}` } })
    const code = ((await inbox.json()) as { data: { messages: Array<{ code: string }> } }).data.messages[0]?.code ?? ''
    const started = Date.now()
    const verified = await post(service.base, '/otp/verify', keys.globexTest, { requestId: sent.body.data.requestId, userGuess: code })
    if (verified.status !== 200) throw new Error(`calm verify: ${JSON.stringify(verified.body)}`)
    await receiver.waitFor(() => receiver.verified.some((entry) => entry.payload.data.requestId === sent.body.data.requestId), `calm event ${label}${i}`, 120_000)
    latencies.push(Date.now() - started)
  }
  return latencies
}

t.test('a tenant whose endpoints never answer does not delay another tenant\'s webhooks', async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  const hanging = await startHangingEndpoints(t, NOISY_ENDPOINTS)
  const secret = webhookSecret()
  const calm = await startReceiver(t, secret)
  const { path, keys } = writeTenants(t, (file) => {
    file.tiers.standard = { allowance: 100_000, window: '1d', sandboxAllowance: 100_000 }
    for (const tenant of file.tenants) {
      if (tenant.id === 'acme') tenant.webhooks = hanging.urls.map((url) => ({ url, secret, events: ['verification.failed'] }))
      if (tenant.id === 'globex') tenant.webhooks = [{ url: calm.url, secret, events: ['verification.succeeded'] }]
    }
  })
  const service = await startServer(t, {
    TENANTS_FILE: path,
    REDIS_URL: redis.url,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    LOG_LEVEL: 'warn',
    LOCKOUT_THRESHOLD: '100000',
    WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true',
    WEBHOOK_TIMEOUT_MS: '60000',
    WEBHOOK_MAX_QUEUED_PER_TENANT: String(QUEUE_CAP),
    WEBHOOK_MAX_IN_FLIGHT_PER_TENANT: String(IN_FLIGHT_CAP)
  })

  const before = await calmLatencies(service, keys, calm, 'before')
  t.comment(`calm tenant, alone:                 ${summary(before)}`)

  // The noisy tenant: wrong guesses, ten at a time, each an event for its 20 hanging endpoints.
  const flooded = Date.now()
  let sentEvents = 0
  await Promise.all(Array.from({ length: 10 }, async (_, lane) => {
    for (let i = lane; i < NOISY_EVENTS; i += 10) {
      const sent = await post(service.base, '/otp/request', keys.acmeTest, { email: `noisy${i}@example.com` })
      const answer = await post(service.base, '/otp/verify', keys.acmeTest, { requestId: sent.body.data.requestId, userGuess: 'abcdef' })
      if (answer.status === 400) sentEvents++
    }
  }))
  t.equal(sentEvents, NOISY_EVENTS, `${NOISY_EVENTS} verification.failed events for ${NOISY_ENDPOINTS} endpoints each (${NOISY_EVENTS * NOISY_ENDPOINTS} deliveries) in ${Date.now() - flooded} ms`)
  await calm.waitFor(() => hanging.open >= IN_FLIGHT_CAP, 'the noisy tenant\'s attempts hanging')

  const during = await calmLatencies(service, keys, calm, 'during')
  t.comment(`calm tenant, while the other floods: ${summary(during)}`)
  t.comment(`p99 during / p99 alone: ×${(percentile(during, 0.99) / Math.max(1, percentile(before, 0.99))).toFixed(1)}`)
  t.ok(Math.max(...during) < CALM_WITHIN_MS, `every calm event delivered within ${CALM_WITHIN_MS} ms while the other tenant's endpoints hang`)
  t.ok(hanging.peak <= IN_FLIGHT_CAP, `the noisy tenant never held more than ${IN_FLIGHT_CAP} attempts at once (peak ${hanging.peak}, ${hanging.accepted} connections in all)`)

  const [stream, retries, dead] = await Promise.all([client.xlen('webhooks:{webhooks:acme}:stream'), client.zcard('webhooks:{webhooks:acme}:retry'), client.xlen('webhooks:{webhooks:acme}:dead')])
  t.comment(`noisy tenant in Redis: stream ${stream}, retries ${retries}, dead letters ${dead}`)
  t.ok(stream + retries <= QUEUE_CAP, `its queue stays within WEBHOOK_MAX_QUEUED_PER_TENANT (${stream} + ${retries} ≤ ${QUEUE_CAP})`)
  t.ok(dead > 0 && dead <= QUEUE_CAP, 'its overflow went to its own dead letters, as many as the cap')
  t.equal(await client.exists('webhooks:{webhooks:globex}:dead'), 0, 'the calm tenant has no dead letter')
})
