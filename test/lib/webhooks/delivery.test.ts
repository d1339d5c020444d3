import t from 'tap'
import { IpRangeSet } from '../../../lib/net/ip-ranges.js'
import type { WebhookEndpoint } from '../../../lib/tenants/registry.js'
import { AddressPolicy } from '../../../lib/webhooks/address-policy.js'
import { checkEndpointUrl } from '../../../lib/webhooks/endpoint-url.js'
import { reachedQuotaThresholds } from '../../../lib/webhooks/events.js'
import type { Delivery } from '../../../lib/webhooks/queue.js'
import { givenUp, retryDelayMs } from '../../../lib/webhooks/retry.js'
import { sendWebhook } from '../../../lib/webhooks/sender.js'
import { startReceiver, webhookSecret } from '../../support/webhook-receiver.js'

const strict = new AddressPolicy({ allowLoopback: false, allowedNetworks: null })

t.test('only public unicast addresses are allowed by default', async (t) => {
  const refused = [
    '10.0.0.1', '172.16.5.4', '192.168.1.1', '127.0.0.1', '127.1.2.3', '::1', '0.0.0.0', '::', '255.255.255.255',
    '169.254.169.254', '169.254.170.2', 'fd00:ec2::254', '100.100.100.200', '192.0.0.192', '168.63.129.16',
    '224.0.0.1', 'ff02::1', 'fe80::1', 'fc00::1', '100.64.0.1', '198.18.0.1', '192.0.2.1', '2001:db8::1',
    '::ffff:10.0.0.1', '::ffff:127.0.0.1', '::ffff:169.254.169.254', '64:ff9b::a00:1', '2002:a00:1::1', '2001::1'
  ]
  for (const address of refused) t.not(strict.addressRefusal(address), null, `${address} refused`)
  t.match(strict.addressRefusal('169.254.169.254'), /metadata/)
  t.match(strict.addressRefusal('::ffff:10.0.0.1'), /10\.0\.0\.1 is a private address/, 'IPv4-mapped IPv6 is judged as the IPv4 address')
  for (const address of ['93.184.215.14', '8.8.8.8', '2606:2800:21f:cb07:6820:80da:af6b:8b2c']) t.equal(strict.addressRefusal(address), null, `${address} allowed`)
  t.not(strict.addressRefusal('not-an-ip'), null)
})

t.test('the operator may allow networks and loopback, never metadata', async (t) => {
  const allowing = new AddressPolicy({ allowLoopback: true, allowedNetworks: IpRangeSet.fromEntries(['10.20.0.0/16', '168.63.0.0/16']).set })
  t.equal(allowing.addressRefusal('10.20.1.2'), null)
  t.not(allowing.addressRefusal('10.21.1.2'), null, 'outside the allowed network')
  t.equal(allowing.addressRefusal('127.0.0.1'), null)
  t.equal(allowing.addressRefusal('::1'), null)
  t.match(allowing.addressRefusal('168.63.129.16'), /metadata/)
})

t.test('URLs: https, or http on loopback only when allowed', async (t) => {
  t.equal(strict.urlRefusal(new URL('https://hooks.acme.test/x')), null)
  t.match(strict.urlRefusal(new URL('http://127.0.0.1:8080/x')), /WEBHOOK_ALLOW_HTTP_LOOPBACK/)
  t.match(strict.urlRefusal(new URL('http://hooks.acme.test/x')), /only https/)
  const loopback = new AddressPolicy({ allowLoopback: true, allowedNetworks: null })
  t.equal(loopback.urlRefusal(new URL('http://localhost:8080/x')), null)
  t.match(loopback.urlRefusal(new URL('http://hooks.acme.test/x')), /only https/, 'http never leaves loopback')

  t.equal(checkEndpointUrl('https://hooks.acme.test/otp').ok, true)
  t.equal(checkEndpointUrl('http://[::1]:9000/otp').ok, true)
  for (const [url, problem] of [['ftp://x.test/', /https/], ['http://hooks.acme.test/', /loopback/], ['https://user:pw@x.test/', /credentials/], ['https://x.test/#f', /fragment/], ['nope', /not a URL/]] as const) {
    const checked = checkEndpointUrl(url)
    t.match(checked.ok ? '' : checked.problem, problem, url)
  }
})

t.test('the connection\'s own DNS lookup refuses what a name resolves to', async (t) => {
  const lookup = async (policy: AddressPolicy, all: boolean): Promise<unknown> => await new Promise((resolve, reject) => {
    policy.lookup('localhost', { all }, (error, address) => { if (error !== null) reject(error); else resolve(address) })
  })
  await t.rejects(lookup(strict, false), { code: 'EWEBHOOKDESTINATION', message: /localhost: .*loopback/ })
  const loopback = new AddressPolicy({ allowLoopback: true, allowedNetworks: null })
  t.match(await lookup(loopback, false), /^(127\.0\.0\.1|::1)$/)
  t.match(await lookup(loopback, true), [{ address: /^(127\.0\.0\.1|::1)$/ }])
})

const secret = webhookSecret()
const endpointFor = (url: string): WebhookEndpoint => ({ url, secret, events: new Set(['verification.succeeded']) })
const deliveryTo = (url: string): Delivery => ({
  messageId: 'msg_test',
  tenant: 'acme',
  url,
  type: 'verification.succeeded',
  createdAtMs: Date.now(),
  attempts: 0,
  body: JSON.stringify({ type: 'verification.succeeded', timestamp: new Date().toISOString(), data: { tenant: 'acme' } })
})
const loopbackPolicy = new AddressPolicy({ allowLoopback: true, allowedNetworks: null })
const options = { policy: loopbackPolicy, timeoutMs: 1000, userAgent: 'test' }

t.test('an attempt is signed per the Standard Webhooks spec and verifies with its library', async (t) => {
  const receiver = await startReceiver(t, secret)
  t.same(await sendWebhook(endpointFor(receiver.url), deliveryTo(receiver.url), options), { ok: true, status: 204 })
  const [received] = receiver.verified
  t.equal(received?.id, 'msg_test')
  t.ok(Math.abs((received?.timestamp ?? 0) - Date.now() / 1000) < 60, 'webhook-timestamp is now, in seconds')
  t.match(received?.headers['webhook-signature'], /^v1,[A-Za-z0-9+/]+=*$/)
  t.equal(received?.headers['content-type'], 'application/json')
  t.match(received?.payload, { type: 'verification.succeeded' })

  const wrongSecret = await startReceiver(t, webhookSecret())
  t.same(await sendWebhook(endpointFor(wrongSecret.url), deliveryTo(wrongSecret.url), options), { ok: false, error: 'HTTP 400' })
  t.equal(wrongSecret.rejected, 1, 'a receiver with another secret refuses the signature')
})

t.test('failures: an error status, a redirect, a receiver too slow', async (t) => {
  const receiver = await startReceiver(t, secret, (attempt) => [{ status: 500 }, { status: 302 }, { status: 200, delayMs: 3000 }][attempt] ?? { status: 200 })
  const send = async (): Promise<unknown> => await sendWebhook(endpointFor(receiver.url), deliveryTo(receiver.url), options)
  t.same(await send(), { ok: false, error: 'HTTP 500' })
  t.same(await send(), { ok: false, error: 'HTTP 302' }, 'redirects are not followed')
  const started = Date.now()
  t.same(await send(), { ok: false, error: 'no answer within 1000 ms' })
  t.ok(Date.now() - started < 2900, 'the attempt ends at its timeout')
})

t.test('refused destinations are never connected to', async (t) => {
  const receiver = await startReceiver(t, secret)
  const port = new URL(receiver.url).port
  const strictOptions = { ...options, policy: strict }
  for (const url of [`http://127.0.0.1:${port}/hooks`, `http://localhost:${port}/hooks`, `https://127.0.0.1:${port}/hooks`, `https://localhost:${port}/hooks`, `https://[::ffff:127.0.0.1]:${port}/hooks`]) {
    const result = await sendWebhook(endpointFor(url), deliveryTo(url), strictOptions)
    t.match(result, { ok: false, error: /^refused: / }, url)
  }
  for (const url of ['https://169.254.169.254/latest/meta-data/', 'https://10.1.2.3/hooks', 'https://[fd00:ec2::254]/', 'http://10.1.2.3/hooks']) {
    t.match(await sendWebhook(endpointFor(url), deliveryTo(url), options), { ok: false, error: /^refused: / }, `${url} (even with loopback allowed)`)
  }
  t.equal(receiver.attempts, 0, 'the receiver saw nothing')
})

t.test('retry schedule: exponential, jittered, capped, given up after its period', async (t) => {
  const schedule = { baseMs: 1000, maxDelayMs: 60_000, forMs: 86_400_000 }
  t.equal(retryDelayMs(schedule, 1, () => 0), 500)
  t.equal(retryDelayMs(schedule, 1, () => 1), 1000)
  t.equal(retryDelayMs(schedule, 4, () => 1), 8000)
  t.equal(retryDelayMs(schedule, 30, () => 1), 60_000, 'capped')
  t.equal(retryDelayMs(schedule, 30, () => 0), 30_000, 'jitter is at most half')
  // With the defaults (5 s, 2 h cap) a delivery is tried for the whole day, about 25 times.
  const defaults = { baseMs: 5000, maxDelayMs: 7_200_000, forMs: 86_400_000 }
  let elapsed = 0
  let attempts = 1
  while (!givenUp(defaults, 0, elapsed)) elapsed += retryDelayMs(defaults, attempts++, () => 0.5)
  t.ok(elapsed >= 86_400_000, 'the last attempt is at least 24 hours after the event')
  t.ok(attempts > 15 && attempts < 40, `${attempts} attempts`)
})

t.test('quota thresholds: the unit that reaches 80% and the one that reaches 100%', async (t) => {
  t.same(reachedQuotaThresholds(8, 10), [80])
  t.same(reachedQuotaThresholds(9, 10), [])
  t.same(reachedQuotaThresholds(10, 10), [100])
  t.same(reachedQuotaThresholds(1, 1), [80, 100])
  t.same(reachedQuotaThresholds(800, 999), [80], '80% of 999 is reached at 800')
  t.same(reachedQuotaThresholds(0, 0), [])
})

t.test('the published payload schema is the one the service builds from', async (t) => {
  const { readFileSync } = await import('node:fs')
  const { webhooksJsonSchema } = await import('../../../lib/cli/webhooks.js')
  const published = readFileSync(new URL('../../../schemas/webhooks.schema.json', import.meta.url), 'utf8')
  t.equal(published, webhooksJsonSchema(), 'schemas/webhooks.schema.json is stale: run npm run schema')
})
