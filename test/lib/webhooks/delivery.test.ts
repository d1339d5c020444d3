import t from 'tap'
import { IpRangeSet } from '../../../lib/net/ip-ranges.js'
import type { WebhookEndpoint } from '../../../lib/tenants/tenant.js'
import { AddressPolicy, type Resolver } from '../../../lib/webhooks/address-policy.js'
import { checkEndpointUrl } from '../../../lib/webhooks/endpoint-url.js'
import { reachedQuotaThresholds } from '../../../lib/webhooks/events.js'
import type { Delivery } from '../../../lib/state/webhook-queue.js'
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

t.test('IPv6 forms that embed an IPv4 address are judged by it; Teredo and local-use NAT64 are refused', async (t) => {
  const embedded: Array<[address: string, form: string, ipv4: string]> = [
    ['::ffff:10.0.0.1', 'IPv4-mapped', '10.0.0.1'],
    ['::ffff:0:10.0.0.1', 'IPv4-translated', '10.0.0.1'],
    ['::10.0.0.1', 'IPv4-compatible', '10.0.0.1'],
    ['::127.0.0.1', 'IPv4-compatible', '127.0.0.1'],
    ['::169.254.169.254', 'IPv4-compatible', '169.254.169.254'],
    ['64:ff9b::10.0.0.1', 'NAT64', '10.0.0.1'],
    ['64:ff9b::127.0.0.1', 'NAT64', '127.0.0.1'],
    ['64:ff9b::192.168.1.1', 'NAT64', '192.168.1.1'],
    ['64:ff9b::169.254.169.254', 'NAT64', '169.254.169.254'],
    ['2002:a00:1::1', '6to4', '10.0.0.1'],
    ['2002:7f00:1:1::', '6to4', '127.0.0.1'],
    ['2002:a9fe:a9fe::1', '6to4', '169.254.169.254'],
    ['2600::5efe:10.0.0.1', 'ISATAP', '10.0.0.1'],
    ['2600:1::200:5efe:192.168.0.1', 'ISATAP', '192.168.0.1']
  ]
  for (const [address, form, ipv4] of embedded) t.match(strict.addressRefusal(address), new RegExp(`embeds ${ipv4.replace(/\./g, '\\.')} \\(${form}\\): ${ipv4.replace(/\./g, '\\.')} is a`), `${address}: ${form} of ${ipv4}`)
  t.match(strict.addressRefusal('64:ff9b::169.254.169.254'), /cloud metadata|linkLocal/)
  t.match(strict.addressRefusal('2001:0:4136:e378:8000:63bf:3fff:fdd2'), /Teredo/, 'Teredo: refused whatever it embeds')
  t.match(strict.addressRefusal('64:ff9b:1::808:808'), /local-use NAT64/, 'local-use NAT64: refused, even of a public address')
  for (const address of ['64:ff9b::8.8.8.8', '2002:808:808::1', '::ffff:8.8.8.8', '2600::5efe:8.8.8.8']) t.equal(strict.addressRefusal(address), null, `${address} embeds a public address: allowed`)

  const loopback = new AddressPolicy({ allowLoopback: true, allowedNetworks: null })
  t.equal(loopback.addressRefusal('::ffff:127.0.0.1'), null, 'with loopback allowed, ::ffff:127.0.0.1 is the local 127.0.0.1')
  for (const address of ['64:ff9b::127.0.0.1', '::127.0.0.1', '2002:7f00:1::1']) t.not(loopback.addressRefusal(address), null, `${address} is another machine's loopback: refused even then`)
  const allowing = new AddressPolicy({ allowLoopback: false, allowedNetworks: IpRangeSet.fromEntries(['10.20.0.0/16']).set })
  t.equal(allowing.addressRefusal('64:ff9b::10.20.1.2'), null, 'an allowed network is allowed embedded too')
  t.not(allowing.addressRefusal('64:ff9b::10.21.1.2'), null)
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

/** A resolver the test controls: the answers a partner's DNS (or an attacker's) could give. */
function resolverOf (answers: Record<string, string[]>): Resolver {
  return (hostname, _options, callback) => {
    const addresses = answers[hostname]
    setImmediate(() => {
      if (addresses === undefined) callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }), [])
      else callback(null, addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })))
    })
  }
}

t.test('public names that resolve to internal addresses are refused on the connection path', async (t) => {
  const answers: Record<string, string[]> = {
    'private.partner.test': ['10.1.2.3'],
    'rebinding.partner.test': ['93.184.215.14', '127.0.0.1'],
    'metadata.partner.test': ['169.254.169.254'],
    'mapped.partner.test': ['::ffff:127.0.0.1'],
    'compatible.partner.test': ['::127.0.0.1'],
    'nat64.partner.test': ['64:ff9b::7f00:1'],
    '6to4.partner.test': ['2002:c0a8:101::1'],
    'isatap.partner.test': ['2600::5efe:c0a8:101'],
    'teredo.partner.test': ['2001:0:4136:e378:8000:63bf:3fff:fdd2'],
    'public.partner.test': ['93.184.215.14', '64:ff9b::5db8:d70e']
  }
  const policy = new AddressPolicy({ allowLoopback: false, allowedNetworks: null, resolve: resolverOf(answers) })
  const receiver = await startReceiver(t, secret)
  for (const name of Object.keys(answers).filter((candidate) => !candidate.startsWith('public'))) {
    const url = `https://${name}:${new URL(receiver.url).port}/hooks/otp`
    const result = await sendWebhook(endpointFor(url), deliveryTo(url), { policy, timeoutMs: 1000, userAgent: 'test' })
    t.match(result, { ok: false, error: new RegExp(`^refused: ${name.replace(/\./g, '\\.')}: `) }, `${name} → ${answers[name]?.join(', ') ?? ''}`)
  }
  t.equal(receiver.attempts, 0, 'nothing was connected to')
  const unknown = await sendWebhook(endpointFor('https://nowhere.partner.test/'), deliveryTo('https://nowhere.partner.test/'), { policy, timeoutMs: 1000, userAgent: 'test' })
  t.match(unknown, { ok: false, error: /^ENOTFOUND/ }, 'a name that does not resolve fails as such')
  const checked = await new Promise((resolve, reject) => {
    policy.lookup('public.partner.test', { all: true }, (error, addresses) => { if (error !== null) reject(error); else resolve(addresses) })
  })
  t.same(checked, [{ address: '93.184.215.14', family: 4 }, { address: '64:ff9b::5db8:d70e', family: 6 }], 'public addresses, NAT64 of a public one included, are handed to the connection')
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
  // The slow answer comes a minute later: far from the 1 s timeout, whatever the machine's speed.
  const receiver = await startReceiver(t, secret, (attempt) => [{ status: 500 }, { status: 302 }, { status: 200, delayMs: 60_000 }][attempt] ?? { status: 200 })
  const send = async (): Promise<unknown> => await sendWebhook(endpointFor(receiver.url), deliveryTo(receiver.url), options)
  t.same(await send(), { ok: false, error: 'HTTP 500' })
  t.same(await send(), { ok: false, error: 'HTTP 302' }, 'redirects are not followed')
  const started = Date.now()
  t.same(await send(), { ok: false, error: 'no answer within 1000 ms' })
  t.ok(Date.now() - started < 30_000, `the attempt ends at its timeout, not at the answer (${Date.now() - started} ms)`)
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
  t.equal(givenUp(schedule, 0, schedule.forMs - 1), false, 'a failure just before the period ends is retried')
  t.equal(givenUp(schedule, 0, schedule.forMs), true, 'one at its end is given up')
  // With the defaults (5 s, 2 h cap) a delivery is tried for the whole day, about 25 times:
  // the attempt times, from the event, and the failure at which it is given up.
  const defaults = { baseMs: 5000, maxDelayMs: 7_200_000, forMs: 86_400_000 }
  const attemptsAt = [0]
  while (!givenUp(defaults, 0, attemptsAt.at(-1) ?? 0)) attemptsAt.push((attemptsAt.at(-1) ?? 0) + retryDelayMs(defaults, attemptsAt.length, () => 0.5))
  const givenUpAt = attemptsAt.at(-1) ?? 0
  const before = attemptsAt.at(-2) ?? 0
  t.ok(before < defaults.forMs, `the attempt before the last, at ${(before / 3_600_000).toFixed(2)} h, was still in the period`)
  t.ok(givenUpAt >= defaults.forMs && givenUpAt <= defaults.forMs + defaults.maxDelayMs, `given up at the first failure after 24 h, within one longest delay of it (${(givenUpAt / 3_600_000).toFixed(2)} h)`)
  t.ok(attemptsAt.length > 15 && attemptsAt.length < 40, `${attemptsAt.length} attempts`)
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
  const { webhooksJsonSchema } = await import('../../../cli/webhooks.js')
  const published = readFileSync(new URL('../../../schemas/webhooks.schema.json', import.meta.url), 'utf8')
  t.equal(published, webhooksJsonSchema(), 'schemas/webhooks.schema.json is stale: run npm run schema')
})
