/*
 * The key names on Redis are a contract with the instances already deployed: they share one
 * Redis with new ones during a rolling upgrade, and what they wrote must be found under the
 * same names. The flows run on a real redis-server and the keys they leave are compared, as
 * patterns (ids, hashes and windows replaced by placeholders), with the list of main.
 */
import t from 'tap'
import { Redis } from 'ioredis'
import { insightsKeyPrefix, lockoutKey, lockoutKeyPrefix, TAG_KEY_FINGERPRINT_COPIES, tokenKey, verificationLogKeys } from '../../../../lib/state/redis/keys.js'
import { hashKey, generateKey } from '../../../../lib/keys/api-keys.js'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../../../helper.js'
import { redisTestOptions, startRedis } from '../../../support/redis.js'
import { startReceiver, webhookSecret } from '../../../support/webhook-receiver.js'
import { until } from '../../../support/wait.js'

/** Captured on main before the stores moved into lib/state. */
const MAIN_KEY_PATTERNS = [
  'idem:{acme:live:acme_live}:r:order-1',
  'lockout:{acme:live}:<id>',
  'lockout:{globex:test}:<id>',
  'otp:{acme:live}:<id>',
  'otp:{acme:live}:<id>:used:<attempt>',
  'otp:{acme:test}:<id>',
  'otp:{globex:test}:<id>:used:<attempt>',
  'quota:{acme:live}:<window>',
  'quota:{acme:live}:k:acme_shared:<window>',
  'quota:{acme:test}:<window>',
  'quota:{globex:test}:<window>',
  'receipt-epoch:{acme:live}',
  'receipt:{acme:live}:<id>',
  'recipient-tag:fingerprint',
  'rl:k:{acme:live}:acme_live',
  'rl:k:{acme:live}:acme_shared',
  'rl:k:{acme:test}:acme_test',
  'rl:k:{globex:test}:globex_test',
  'rl:m:{mailbox:live:<id>}',
  'rl:m:{mailbox:live:browser:<id>}',
  'rl:m:{mailbox:test:<id>}',
  'rl:r:{acme:live}:<id>',
  'rl:r:{acme:live}:browser:<id>',
  'rl:r:{acme:test}:<id>',
  'rl:r:{globex:test}:<id>',
  'rl:route:GET/sandbox/messages-acme:test:acme_test',
  'rl:route:GET/usage-acme:live:acme_live',
  'rl:route:POST/otp/receipts/redeem-acme:live:acme_live',
  'rl:route:POST/recipients/suppress-acme:live:acme_live',
  'rl:route:POST/recipients/unlock-acme:live:acme_live',
  'rl:s:{acme:live}:127.0.0.1',
  'rl:s:{acme:test}:127.0.0.1',
  'rl:s:{globex:test}:127.0.0.1',
  'sandbox-boxes:{acme}',
  'sandbox-boxes:{globex}',
  'sandbox-bytes:{acme}',
  'sandbox-bytes:{globex}',
  'sandbox-entries:{acme}:sandbox@example.com',
  'sandbox-entries:{globex}:refused@example.com',
  'sandbox-pieces:{acme}:<id>',
  'sandbox-total:{acme}',
  'sandbox-total:{globex}',
  'suppressed:{acme:live}:<id>',
  'webhooks:{webhooks:acme}:once:quota:acme:live:<window>:<n>',
  'webhooks:{webhooks:globex}:retry',
  'webhooks:{webhooks:globex}:stream',
  'webhooks:{webhooks}:tenants',
  'webhooks:{webhooks}:version',
  // Added since: verification stories, in the slot of their tenant and mode; the stories its
  // pages dispatched have an index of their own (a cap apart from the backend's).
  'vlog:browser:{acme:live}',
  'vlog:{acme:live}',
  'vlog:{acme:live}:<id>',
  'vlog:{acme:test}',
  'vlog:{acme:test}:<id>',
  'vlog:{globex:test}',
  'vlog:{globex:test}:<id>',
  // Added since: a tenant's live sending reputation, an hour's counts a hash, in its live slot.
  'reputation:{acme:live}:<n>'
].sort()

/**
 * Names added since, each beside none of main's: a tenant's mailbox count per lane, its reserve
 * inside the mailbox cap (lib/state/redis/keys.ts, mailboxCountKey). Instances that predate it
 * neither read nor write it; what a mixed fleet does is in docs/abuse-controls.md.
 */
const ADDED_KEY_PATTERNS = [
  'rl:mc:{acme:live}:<id>',
  'rl:mc:{acme:live}:browser:<id>',
  'rl:mc:{acme:test}:<id>',
  'rl:mc:{globex:test}:<id>',
  // The funnel of GET /insights: an hour's and a day's counts, a hash each, in the scope's slot.
  'insights:{acme:live}:d:<n>',
  'insights:{acme:live}:h:<n>',
  'insights:{acme:test}:d:<n>',
  'insights:{acme:test}:h:<n>',
  'insights:{globex:test}:d:<n>',
  'insights:{globex:test}:h:<n>'
]

function wrong (code: string): string {
  return String((Number(code) + 1) % 1_000_000).padStart(6, '0')
}

/** A key as a pattern: every opaque segment (ids, hashes, numbers) replaced by a placeholder. */
function pattern (key: string): string {
  const windowed = key.replace(/[0-9]+[smhd]@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z/g, '<window>').replace(/:used:.*$/, ':used:<attempt>')
  return windowed.split(/([:{}])/).map((part) => {
    if (/^[0-9]+$/.test(part)) return '<n>'
    if (part.length >= 16 && /^[A-Za-z0-9_.-]+$/.test(part)) return '<id>'
    return part
  }).join('')
}

t.test('the flows leave the key names deployed instances use', { ...redisTestOptions(), timeout: 60_000 }, async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const secret = webhookSecret()
  const receiver = await startReceiver(t, secret)
  const browserKey = generateKey('restricted', 'live')
  const { path, keys } = writeTenants(t, (file) => {
    file.tiers = { standard: { allowance: 5, window: '1d', sandboxAllowance: 100 } }
    file.tenants[0]!.webhooks = [{ url: receiver.url, secret, events: ['verification.succeeded', 'verification.failed', 'quota.threshold'] }]
    // An endpoint that refuses connections: its deliveries wait in the retry set.
    file.tenants[1]!.webhooks = [{ url: 'http://127.0.0.1:9/hook', secret, events: ['verification.failed'] }]
    // A part of acme's own, so that its sandbox message keeps its pieces once.
    file.tenants[0]!.templates = { en: { text: 'Your code: {{ code }}' } }
    file.tenants[0]!.keys.push({ id: 'acme_shared', kind: 'restricted', mode: 'live', sha256: hashKey(browserKey), origins: ['app.acme.test'], allowance: '50%' })
  })
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true', RATE_LIMIT_MAILBOX: '100/15m' })
  const post = async (key: string, url: string, payload: unknown, headers: Record<string, string> = {}) =>
    await app.inject({ method: 'POST', url, headers: { ...bearer(key), ...headers }, payload: payload as Record<string, unknown> })

  // Dispatch, a wrong guess (lockout), the right one (receipt), its redemption.
  const sent = await post(keys.acmeLive, '/otp/request', { email: 'someone@example.com' })
  t.equal(sent.statusCode, 200)
  const { requestId } = sent.json().data
  const code = mail.codeFor('someone@example.com')
  const second = await post(keys.acmeLive, '/otp/request', { email: 'other@example.com' })
  t.equal((await post(keys.acmeLive, '/otp/verify', { requestId: second.json().data.requestId, userGuess: wrong(mail.codeFor('other@example.com')) })).statusCode, 400)
  const verified = await post(keys.acmeLive, '/otp/verify', { requestId, userGuess: code })
  t.equal(verified.statusCode, 200)
  t.equal((await post(keys.acmeLive, '/otp/receipts/redeem', { receipt: verified.json().data.receipt, email: 'someone@example.com' })).statusCode, 200)
  // An idempotent dispatch, its replay; a restricted key's share; the 80 % threshold.
  t.equal((await post(keys.acmeLive, '/otp/request', { email: 'idem@example.com' }, { 'idempotency-key': 'order-1' })).statusCode, 200)
  t.equal((await post(keys.acmeLive, '/otp/request', { email: 'idem@example.com' }, { 'idempotency-key': 'order-1' })).statusCode, 200)
  t.equal((await post(browserKey, '/otp/request', { email: 'browser@example.com' }, { origin: 'https://app.acme.test' })).statusCode, 200)
  // The sandbox inbox, suppression and unlock, the account routes' own limits.
  t.equal((await post(keys.acmeTest, '/otp/request', { email: 'sandbox@example.com' })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/sandbox/messages?email=sandbox@example.com', headers: bearer(keys.acmeTest) })).statusCode, 200)
  t.equal((await post(keys.acmeLive, '/recipients/suppress', { email: 'gone@example.com' })).statusCode, 200)
  t.equal((await post(keys.acmeLive, '/recipients/unlock', { email: 'gone@example.com' })).statusCode, 200)
  const refused = await post(keys.globexTest, '/otp/request', { email: 'refused@example.com' })
  t.equal((await post(keys.globexTest, '/otp/verify', { requestId: refused.json().data.requestId, userGuess: '000000' })).statusCode, 400)
  t.equal((await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).statusCode, 200)
  await receiver.waitFor(() => receiver.verified.length >= 3, 'the webhooks')
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  // The last key a flow writes: globex's delivery, refused by its endpoint, waits for a retry.
  await until('globex\'s refused delivery in its retry set', async () => await client.zcard('webhooks:{webhooks:globex}:retry') > 0)

  await app.state.verificationLog.flush()
  await app.state.insights.flush()
  const found = new Set<string>()
  let cursor = '0'
  do {
    const [next, batch] = await client.scan(cursor, 'COUNT', 1000)
    for (const key of batch) found.add(pattern(key))
    cursor = next
  } while (cursor !== '0')
  t.same([...found].sort(), [...MAIN_KEY_PATTERNS, ...ADDED_KEY_PATTERNS].sort(), 'the key patterns of main, and the ones added since')
})

t.test('the keys a script derives share the slot of the key they derive from', async (t) => {
  const tag = (key: string): string | undefined => /\{[^}]*\}/.exec(key)?.[0]
  // The verify script builds the lockout key from this prefix and the lane subject it reads in the token.
  t.equal(tag(lockoutKeyPrefix('acme', 'live') + 'browser:tag'), tag(tokenKey('acme', 'live', 'request')))
  t.equal(tag(lockoutKey('acme', 'live', 'tag')), tag(tokenKey('acme', 'live', 'request')))
  t.not(tag(lockoutKeyPrefix('acme', 'live')), tag(tokenKey('acme', 'test', 'request')), 'the sandbox is another slot')
  // The verification log's script builds the insights buckets from this prefix and the request time its story keeps.
  t.equal(tag(insightsKeyPrefix('acme', 'live') + 'h:493000'), tag(verificationLogKeys('acme', 'live').story('request')))
})

t.test('on a Cluster, the recipient tag key fingerprint\'s copies beside recipient-tag:fingerprint', async (t) => {
  // Read and written by every instance on a Cluster; their slots are checked on a real one (test/server/redis-cluster.test.ts).
  t.same(TAG_KEY_FINGERPRINT_COPIES, [
    'fp10235', 'fp7381', 'fp9531', 'fp28334', 'fp40510', 'fp19401', 'fp21500', 'fp5477',
    'fp2695', 'fp10053', 'fp2258', 'fp9757', 'fp13882', 'fp4936', 'fp5611', 'fp18940'
  ].map((tag) => `recipient-tag:fingerprint:{${tag}}`))
})
