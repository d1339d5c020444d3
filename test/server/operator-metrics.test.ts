import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import t, { type Test } from 'tap'
import { TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { startSmtp } from '../support/mail-peers.js'
import { freePort, redisAvailable, startRedis } from '../support/redis.js'
import { post, startServer } from '../support/service-process.js'
import { until } from '../support/wait.js'
import { startReceiver, webhookSecret } from '../support/webhook-receiver.js'

const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version

/** The value of one series of a Prometheus text exposition, or null when it is absent. */
function sample (text: string, name: string, labels: Record<string, string>): number | null {
  const wanted = Object.entries(labels).map(([key, value]) => `${key}="${value}"`)
  for (const line of text.split('\n')) {
    const match = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (match === null || match[1] !== name) continue
    const present = (match[2] ?? '').split(',')
    if (wanted.every((label) => present.includes(label))) return Number(match[3])
  }
  return null
}

async function operatorMetrics (t: Test, store: 'memory' | 'redis'): Promise<void> {
  const smtp = await startSmtp(t)
  const secret = webhookSecret()
  // The partner is down: the delivery stays queued for its next attempt, an hour away.
  const partner = await startReceiver(t, secret, () => ({ status: 503 }))
  const { path, keys } = writeTenants(t, (file) => {
    const acme = file.tenants.find((tenant) => tenant.id === 'acme')
    if (acme === undefined) throw new Error('no acme')
    acme.addressHashKey = randomBytes(32).toString('base64')
    acme.webhooks = [{ url: partner.url, secret, events: ['verification.succeeded'] }]
  })
  const redis = store === 'redis' ? await startRedis() : null
  if (redis !== null) t.teardown(() => redis.stop())
  const metricsPort = await freePort()
  const server = await startServer(t, {
    TENANTS_FILE: path,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    ...(redis === null ? {} : { REDIS_URL: redis.url }),
    MAIL_TRANSPORT: 'smtp',
    SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`,
    MAIL_FROM: 'codes@otp.test',
    WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true',
    WEBHOOK_RETRY_BASE_MS: '3600000',
    METRICS_PORT: String(metricsPort)
  })
  const scrape = async (): Promise<string> => await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()

  const email = 'metrics@example.com'
  const dispatched = await post(server.base, '/otp/request', keys.acmeLive, { email })
  t.equal(dispatched.status, 200)
  const code = /\b(\d{6})\b/.exec(String(smtp.received[0]?.text))?.[1] ?? ''
  t.equal((await post(server.base, '/otp/verify', keys.acmeLive, { requestId: dispatched.body.data.requestId, userGuess: code })).status, 200)
  await partner.waitFor(() => partner.attempts >= 1, 'the first attempt')

  let text = ''
  await until('the failed delivery to wait for its retry, and to age', async () => {
    text = await scrape()
    return sample(text, 'email_otp_webhook_queue_depth', { tenant: 'acme' }) === 1 && (sample(text, 'email_otp_webhook_queue_oldest_age_seconds', { tenant: 'acme' }) ?? 0) > 0
  })
  t.pass('acme\'s queue holds the delivery, and its age grows')
  t.equal(sample(text, 'email_otp_webhook_queue_depth', { tenant: 'globex' }), 0, 'a tenant with nothing queued shows 0')
  t.equal(sample(text, 'email_otp_webhook_queue_oldest_age_seconds', { tenant: 'globex' }), 0)
  t.equal(sample(text, 'email_otp_build_info', { version, node_version: process.versions.node }), 1, 'build info names the version and the Node.js version')
  t.equal(sample(text, 'email_otp_mail_send_duration_seconds_count', { transport: 'smtp', result: 'sent' }), 1, 'one SMTP send timed')
  t.ok((sample(text, 'email_otp_mail_send_duration_seconds_sum', { transport: 'smtp', result: 'sent' }) ?? 0) > 0, 'with its duration')
  t.notMatch(text, email, 'no address in the metrics')
}

t.test('embedded default: build info, mail send latency, webhook queue depth and oldest age on the internal listener', async (t) => {
  await operatorMetrics(t, 'memory')
})

t.test('Redis: the same from the durable queue', { skip: redisAvailable ? false : 'redis-server is not installed' }, async (t) => {
  await operatorMetrics(t, 'redis')
})
