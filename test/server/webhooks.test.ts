import { createHmac, randomBytes } from 'node:crypto'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { Value } from '@sinclair/typebox/value'
import { run as webhooksCli } from '../../cli/webhooks.js'
import { WebhookPayloads } from '../../schemas/webhooks.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { bearer, buildApp, TEST_HMAC_KEYS, TEST_METRICS_TOKEN, writeTenants, type FixtureKeys, type TestApp } from '../helper.js'
import { redisTestOptions, startRedis, type RedisServer } from '../support/redis.js'
import { post, startServer } from '../support/service-process.js'
import { startHangingEndpoints, startReceiver, webhookSecret, type WebhookReceiver } from '../support/webhook-receiver.js'
import { until } from '../support/wait.js'

type App = TestApp['app']

const ADDRESS_KEY = randomBytes(32)
const addressHash = (email: string): string => createHmac('sha256', ADDRESS_KEY).update(email.toLowerCase()).digest().subarray(0, 16).toString('base64url')

/** Fast retries, so that a test sees several attempts and the dead letters in seconds. */
const FAST = { WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true', WEBHOOK_RETRY_BASE_MS: '100', WEBHOOK_RETRY_MAX_DELAY_MS: '400', WEBHOOK_TIMEOUT_MS: '1000' }

function withEndpoint (t: Test, url: string, secret: string, mutate?: (file: TenantsFile) => void): { path: string, keys: FixtureKeys } {
  return writeTenants(t, (file) => {
    const acme = file.tenants.find((tenant) => tenant.id === 'acme')
    if (acme === undefined) throw new Error('no acme')
    acme.addressHashKey = ADDRESS_KEY.toString('base64')
    acme.webhooks = [{ url, secret, events: ['verification.succeeded', 'verification.failed', 'delivery.failed', 'recipient.locked', 'quota.threshold'] }]
    mutate?.(file)
  })
}

async function dispatch (app: App, key: string, email: string): Promise<string> {
  const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })
  return answer.json().data?.requestId as string
}

async function verify (app: App, key: string, requestId: string, userGuess: string): Promise<number> {
  return (await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(key), payload: { requestId, userGuess } })).statusCode
}

const wrong = (code: string): string => code === '000000' ? '111111' : '000000'

/** Waits until the tenant's queue holds nothing: every delivery settled (delivered or dead), none to come. */
async function waitUntilDrained (app: App, tenant: string): Promise<void> {
  await until(`the webhook queue of ${tenant} to drain`, async () => (await app.state.webhookQueue.backlog(tenant)).depth === 0, 60_000)
}

function typesOf (receiver: WebhookReceiver): string[] {
  return receiver.verified.map((entry) => entry.payload.type as string)
}

t.test('embedded default: every event type reaches a real endpoint, signed, with no address or code', async (t) => {
  const secret = webhookSecret()
  const receiver = await startReceiver(t, secret)
  const { path, keys } = withEndpoint(t, receiver.url, secret, (file) => { file.tiers.standard = { allowance: 5, window: '1d', sandboxAllowance: 100 } })
  const { app, mail, logs } = await buildApp(t, { ...FAST, TENANTS_FILE: path, LOCKOUT_THRESHOLD: '2' })
  t.match(logs.text, /webhook queue in memory/)

  const right = await dispatch(app, keys.acmeLive, 'ada@example.com')
  const rightCode = mail.codeFor('ada@example.com')
  t.equal(await verify(app, keys.acmeLive, right, rightCode), 200)
  const codes = [rightCode]
  for (let i = 0; i < 2; i++) {
    const requestId = await dispatch(app, keys.acmeLive, 'mallory@example.com')
    const code = mail.codeFor('mallory@example.com')
    codes.push(code)
    t.equal(await verify(app, keys.acmeLive, requestId, wrong(code)), 400)
  }
  await dispatch(app, keys.acmeLive, 'quota@example.com')
  await dispatch(app, keys.acmeLive, 'quota2@example.com')
  const failed = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeTest), payload: { email: 'fail@simulator.invalid' } })
  t.equal(failed.statusCode, 502)

  await receiver.waitFor(() => receiver.verified.length >= 7, 'seven events')
  await waitUntilDrained(app, 'acme')
  t.same(typesOf(receiver).sort(), ['delivery.failed', 'quota.threshold', 'quota.threshold', 'recipient.locked', 'verification.failed', 'verification.failed', 'verification.succeeded'])
  t.equal(receiver.rejected, 0, 'every signature verified with the standardwebhooks library')
  t.equal(new Set(receiver.verified.map((entry) => entry.id)).size, 7, 'one webhook-id per event')

  const byType = (type: string): any[] => receiver.verified.filter((entry) => entry.payload.type === type).map((entry) => entry.payload)
  t.match(byType('verification.succeeded')[0], { timestamp: /Z$/, data: { tenant: 'acme', mode: 'live', requestId: right, addressHash: addressHash('ada@example.com') } })
  t.match(byType('verification.failed'), [{ data: { reason: 'wrong_code', addressHash: addressHash('mallory@example.com') } }, { data: { reason: 'wrong_code' } }])
  t.match(byType('recipient.locked')[0], { data: { addressHash: addressHash('mallory@example.com'), lockedUntil: /Z$/ } })
  t.same(byType('quota.threshold').map((payload) => [payload.data.threshold, payload.data.used, payload.data.limit]), [[80, 4, 5], [100, 5, 5]])
  t.match(byType('delivery.failed')[0], { data: { mode: 'test', reason: 'rejected', addressHash: addressHash('fail@simulator.invalid') } })
  for (const { payload } of receiver.verified) {
    const schema = WebhookPayloads.find((candidate) => candidate.title === payload.type)
    t.ok(schema !== undefined && Value.Check(schema, payload), `${String(payload.type)} matches its published schema`)
  }
  const everything = JSON.stringify(receiver.verified.map((entry) => entry.payload))
  for (const secretValue of ['ada@', 'mallory@', 'quota@', 'simulator.invalid', ...codes]) t.notOk(everything.includes(secretValue), `no ${secretValue.includes('@') ? 'address' : 'code'} in any payload`)
})

t.test('a failing, then slow, then healthy endpoint gets the event once it answers, with one webhook-id', async (t) => {
  const secret = webhookSecret()
  const receiver = await startReceiver(t, secret, (attempt) => [{ status: 500 }, { status: 200, delayMs: 2500 }, { status: 503 }][attempt] ?? { status: 200 })
  const { path, keys } = withEndpoint(t, receiver.url, secret)
  // Retries at least a second apart, so that each attempt's own webhook-timestamp (seconds) differs from the last.
  const { app, mail } = await buildApp(t, { ...FAST, TENANTS_FILE: path, WEBHOOK_RETRY_BASE_MS: '2000', WEBHOOK_RETRY_MAX_DELAY_MS: '2000' })
  const requestId = await dispatch(app, keys.acmeLive, 'ada@example.com')
  t.equal(await verify(app, keys.acmeLive, requestId, mail.codeFor('ada@example.com')), 200)
  await receiver.waitFor(() => receiver.attempts >= 4, 'four attempts')
  await waitUntilDrained(app, 'acme')
  t.equal(receiver.attempts, 4, 'the success settled the delivery: no attempt after it')
  t.equal(new Set(receiver.verified.map((entry) => entry.id)).size, 1, 'every attempt carries the same webhook-id')
  const stamps = receiver.verified.map((entry) => entry.timestamp)
  t.ok(stamps.every((stamp, index) => index === 0 || stamp > (stamps[index - 1] ?? Infinity)), `webhook-timestamp increases strictly from attempt to attempt (${stamps.join(', ')})`)
  // Stamped when sent: after the attempt before it was received, never after its own arrival (as relations, not a window a slow machine could miss).
  t.ok(receiver.verified.every((entry, index) => entry.timestamp <= entry.receivedAtMs / 1000 && (index === 0 || entry.timestamp >= Math.floor((receiver.verified[index - 1]?.receivedAtMs ?? Infinity) / 1000))), 'each is the time of its own attempt')
})

t.test('per-endpoint concurrency is bounded', async (t) => {
  const secret = webhookSecret()
  let inFlight = 0
  let peak = 0
  const receiver = await startReceiver(t, secret, () => {
    inFlight++
    peak = Math.max(peak, inFlight)
    setTimeout(() => { inFlight-- }, 300)
    return { status: 200, delayMs: 300 }
  })
  const { path, keys } = withEndpoint(t, receiver.url, secret)
  const { app, mail } = await buildApp(t, { ...FAST, TENANTS_FILE: path, WEBHOOK_CONCURRENCY_PER_ENDPOINT: '2' })
  for (let i = 0; i < 8; i++) {
    const requestId = await dispatch(app, keys.acmeLive, `burst${i}@example.com`)
    await verify(app, keys.acmeLive, requestId, wrong(mail.codeFor(`burst${i}@example.com`)))
  }
  await receiver.waitFor(() => receiver.verified.length >= 8, 'eight events', 60_000)
  t.ok(peak <= 2, `at most 2 at once (saw ${peak})`)
  t.equal(new Set(receiver.verified.map((entry) => entry.id)).size, 8)
})

t.test('a tenant whose 20 endpoints never answer does not delay another tenant\'s events', async (t) => {
  const hanging = await startHangingEndpoints(t, 20)
  const secret = webhookSecret()
  const calm = await startReceiver(t, secret)
  const { path, keys } = writeTenants(t, (file) => {
    for (const tenant of file.tenants) {
      if (tenant.id === 'acme') tenant.webhooks = hanging.urls.map((url) => ({ url, secret, events: ['verification.failed'] }))
      if (tenant.id === 'globex') tenant.webhooks = [{ url: calm.url, secret, events: ['verification.succeeded'] }]
    }
  })
  // Attempts wait a minute for an answer: the hanging endpoints hold their slots throughout.
  const { app, logs } = await buildApp(t, { ...FAST, TENANTS_FILE: path, WEBHOOK_TIMEOUT_MS: '60000', LOCKOUT_THRESHOLD: '1000', WEBHOOK_MAX_QUEUED_PER_TENANT: '500' })
  const refused: number[] = []
  for (let i = 0; i < 100; i++) {
    const requestId = await dispatch(app, keys.acmeLive, `noisy${i}@example.com`)
    refused.push(await verify(app, keys.acmeLive, requestId, 'abcdef'))
  }
  t.ok(refused.every((status) => status === 400), '100 wrong guesses: 100 verification.failed events for 20 endpoints each')
  await calm.waitFor(() => hanging.open >= 8, 'the noisy tenant\'s attempts hanging')
  t.equal((await app.state.webhookQueue.backlog('acme')).depth, 500, 'its backlog holds WEBHOOK_MAX_QUEUED_PER_TENANT deliveries')
  const metrics = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  t.match(metrics.body, /^email_otp_webhook_overflow_total 1500$/m, 'the 1,500 pushed into its dead letters are counted')
  t.equal(logs.text.split('\n').filter((line) => line.includes('webhook queue of a tenant is full')).length, 1, 'and logged once for the burst')
  t.match(logs.text, /"tenant":"acme","overflowed":[0-9]+/, 'naming the tenant')
  t.same((await app.state.webhookQueue.deadLetters('globex', 10)), [], 'nothing of the calm tenant\'s')

  const latencies: number[] = []
  for (let i = 0; i < 3; i++) {
    const email = `calm${i}@example.com`
    const requestId = await dispatch(app, keys.globexTest, email)
    const inbox = await app.inject({ method: 'GET', url: `/sandbox/messages?email=${email}`, headers: bearer(keys.globexTest) })
    const code = inbox.json().data.messages[0]?.code as string
    const verifyingAt = Date.now()
    t.equal(await verify(app, keys.globexTest, requestId, code), 200)
    await calm.waitFor(() => calm.verified.some((entry) => entry.payload.data.requestId === requestId), `calm event ${i}`, 60_000)
    latencies.push(Date.now() - verifyingAt)
  }
  // Starved, a calm event would wait for the hanging attempts' minute: half of it, so no machine's speed decides.
  t.ok(Math.max(...latencies) < 30_000, `each calm event delivered long before the noisy tenant's attempts time out (${latencies.join(', ')} ms)`)
  t.ok(hanging.peak <= 8, `the noisy tenant held at most WEBHOOK_MAX_IN_FLIGHT_PER_TENANT (8) attempts (peak ${hanging.peak})`)
})

t.test('on Redis', redisTestOptions(), async (t) => {
  const redis: RedisServer = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  t.beforeEach(async () => { await client.flushall() })
  const env = { ...FAST, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }

  t.test('two instances on one Redis: each event is delivered once', async (t) => {
    const secret = webhookSecret()
    const receiver = await startReceiver(t, secret, (attempt) => ({ status: attempt % 3 === 0 ? 500 : 200 }))
    const { path, keys } = withEndpoint(t, receiver.url, secret)
    const a = await buildApp(t, { ...env, TENANTS_FILE: path })
    const b = await buildApp(t, { ...env, TENANTS_FILE: path })
    const events = 12
    for (let i = 0; i < events; i++) {
      const [from, to] = i % 2 === 0 ? [a, b] : [b, a]
      const requestId = await dispatch(from.app, keys.acmeLive, `two${i}@example.com`)
      await verify(to.app, keys.acmeLive, requestId, wrong(from.mail.codeFor(`two${i}@example.com`)))
    }
    const successes = (): string[] => receiver.verified.filter((entry) => entry.status === 200).map((entry) => entry.id)
    await receiver.waitFor(() => new Set(successes()).size >= events, `${events} delivered events`, 60_000)
    await waitUntilDrained(a.app, 'acme')
    t.ok(receiver.verified.some((entry) => entry.status === 500), 'some attempts failed and were retried')
    t.equal(successes().length, events, 'with the queue drained: no event answered 2xx twice')
    t.equal(new Set(successes()).size, events)
  })

  t.test('an endpoint that always fails ends in the dead letters; the CLI lists and replays them', async (t) => {
    const secret = webhookSecret()
    const receiver = await startReceiver(t, secret, () => ({ status: 500 }))
    const { path, keys } = withEndpoint(t, receiver.url, secret)
    const { app, mail } = await buildApp(t, { ...env, TENANTS_FILE: path, WEBHOOK_RETRY_FOR: '2s' })
    const requestId = await dispatch(app, keys.acmeLive, 'dead@example.com')
    t.equal(await verify(app, keys.acmeLive, requestId, mail.codeFor('dead@example.com')), 200)

    const notes: string[] = []
    // The CLI needs only the Redis variables: it signs nothing (no OTP_HMAC_KEYS).
    const cli = async (...argv: string[]): Promise<string[]> => {
      const lines: string[] = []
      await webhooksCli(argv, { env: { REDIS_URL: redis.url }, out: (line) => { lines.push(line) }, note: (line) => { notes.push(line) } })
      return lines
    }
    let letters: any[] = []
    await until('a dead letter', async () => {
      letters = (await cli('dead-letters', 'list')).map((line) => JSON.parse(line))
      return letters.length > 0
    }, 30_000)
    t.equal(letters.length, 1, 'one dead letter')
    const [letter] = letters
    t.match(letter, { tenant: 'acme', url: receiver.url, type: 'verification.succeeded', messageId: /^msg_/, lastError: 'HTTP 500' })
    t.ok(letter.attempts >= 3, `${letter.attempts} attempts over the retry period`)
    t.equal(letter.id.startsWith('acme/'), true, 'ids name the tenant')
    await waitUntilDrained(app, 'acme')
    t.equal(receiver.attempts, letter.attempts, 'with nothing left queued, every attempt reached the endpoint and none will follow')
    const attemptsBefore = receiver.attempts

    receiver.behave(() => ({ status: 200 }))
    t.same(await cli('dead-letters', 'replay', '--id', letter.id), ['replayed 1 dead letter'])
    await receiver.waitFor(() => receiver.attempts > attemptsBefore, 'the replayed delivery')
    t.equal(receiver.verified.at(-1)?.id, letter.messageId, 'replayed with its webhook-id')
    t.same(await cli('dead-letters', 'list'), [])
    t.equal(notes.at(-1), 'No dead letters.', 'an empty list says so (on stderr)')
    t.same(await cli('dead-letters', 'list', '--tenant', 'globex'), [])
    t.equal(notes.at(-1), 'No dead letters for tenant globex.')
    t.same(await cli('dead-letters', 'replay', '--all'), ['replayed 0 dead letters'])
    await t.rejects(cli('dead-letters', 'replay', '--id', letter.id), new RegExp(`no dead letter ${letter.id}`), 'a letter already replayed is an error, not "replayed 0"')
    await t.rejects(cli('dead-letters', 'replay', '--id', '1714560000000-0'), /ids are <tenant>\/<id>/)
    await t.rejects(webhooksCli(['dead-letters', 'list'], { env: {}, out: () => {}, note: () => {} }), /kept in Redis/)
  })

  t.test('a restart between attempts loses nothing (real processes)', async (t) => {
    const secret = webhookSecret()
    const receiver = await startReceiver(t, secret, (attempt) => ({ status: attempt === 0 ? 500 : 200 }))
    const { path, keys } = withEndpoint(t, receiver.url, secret)
    const processEnv = { ...env, TENANTS_FILE: path, LOG_LEVEL: 'warn', WEBHOOK_RETRY_BASE_MS: '3000', WEBHOOK_RETRY_MAX_DELAY_MS: '3000' }
    const first = await startServer(t, processEnv)
    const sent = await post(first.base, '/otp/request', keys.acmeTest, { email: 'restart@example.com' })
    const inbox = await fetch(`${first.base}/sandbox/messages?email=restart@example.com`, { headers: bearer(keys.acmeTest) })
    const code = ((await inbox.json()) as { data: { messages: Array<{ code: string }> } }).data.messages[0]?.code ?? ''
    t.equal((await post(first.base, '/otp/verify', keys.acmeTest, { requestId: sent.body.data.requestId, userGuess: code })).status, 200)
    await receiver.waitFor(() => receiver.attempts >= 1, 'the first, failing attempt')
    // The receiver answers before the worker records the retry: wait for the record, then kill.
    await until('the retry recorded', async () => await client.zcard('webhooks:{webhooks:acme}:retry') > 0)
    first.child.kill('SIGKILL')
    t.equal(await client.zcard('webhooks:{webhooks:acme}:retry'), 1, 'the retry waits in Redis while no instance runs')

    await startServer(t, processEnv)
    await receiver.waitFor(() => receiver.attempts >= 2, 'the retry, from the new process', 60_000)
    const [failedAttempt, retried] = receiver.verified
    t.equal(retried?.id, failedAttempt?.id, 'the same event')
    t.match(retried?.payload, { type: 'verification.succeeded', data: { mode: 'test', requestId: sent.body.data.requestId } })
  })
})
