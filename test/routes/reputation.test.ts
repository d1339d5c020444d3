/*
 * The guard on the shared sending reputation through the real routes: live dispatches, SES
 * bounces and complaints as SNS posts them (signed with the fixture's key, its certificate
 * served from SNS's own host name on loopback), the webhook on a real receiver, and the
 * operator's `email-otp tenants resume` against the same redis-server.
 */
import { createSign, randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { errorCatalog } from '../../schemas/error-catalog.js'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { runCli, type CliFailure } from '../support/cli.js'
import { playHost } from '../support/https-hosts.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { until } from '../support/wait.js'
import { startReceiver, webhookSecret } from '../support/webhook-receiver.js'

const KEY = readFileSync(new URL('../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')
const CERT = readFileSync(new URL('../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')
const TOPIC = 'arn:aws:sns:eu-west-1:123456789012:ses-events'
const PEM = '/SimpleNotificationService-0123456789abcdef.pem'

/** SNS's certificate host, played on loopback under its own name. */
async function snsHost (t: Test): Promise<string> {
  const host = await playHost(t, 'sns.eu-west-1.amazonaws.com', (request, response) => {
    if (request.url === PEM) response.writeHead(200, { 'content-type': 'application/x-pem-file' }).end(CERT)
    else response.writeHead(404).end()
  })
  return host.origin
}

/** A Notification of an SES event, signed as SNS signs (SignatureVersion 2). */
function signedEvent (origin: string, event: object): Record<string, string> {
  const message: Record<string, string> = {
    Type: 'Notification',
    MessageId: randomUUID(),
    TopicArn: TOPIC,
    Message: JSON.stringify(event),
    Timestamp: new Date().toISOString(),
    SigningCertURL: `${origin}${PEM}`
  }
  const signer = createSign('RSA-SHA256')
  for (const field of ['Message', 'MessageId', 'Timestamp', 'TopicArn', 'Type']) signer.update(`${field}\n${message[field] ?? ''}\n`)
  return { ...message, SignatureVersion: '2', Signature: signer.sign(KEY, 'base64') }
}

function sesEvent (eventType: 'Bounce' | 'Complaint', requestId: string, address: string, mode = 'live'): object {
  const mail = { messageId: `ses-${requestId}`, destination: [address], tags: { tenant: ['acme'], mode: [mode], requestId: [requestId] } }
  return eventType === 'Bounce'
    ? { eventType, mail, bounce: { bounceType: 'Permanent', bouncedRecipients: [{ emailAddress: address }] } }
    : { eventType, mail, complaint: { complainedRecipients: [{ emailAddress: address }] } }
}

async function gauge (app: FastifyInstance): Promise<number | undefined> {
  return (await app.metrics.registry.getSingleMetric('email_otp_tenant_sending_paused')?.get())?.values.find((value) => value.labels.tenant === 'acme')?.value
}

for (const store of ['memory', 'redis'] as const) {
  t.test(`a tenant whose live mail bounces past the rate is paused; its sandbox and its sent codes keep working (${store})`, { ...(store === 'redis' ? redisTestOptions() : {}), timeout: 120_000 }, async (t) => {
    let redisEnv: Record<string, string> = {}
    if (store === 'redis') {
      const redis = await startRedis()
      t.teardown(async () => { await redis.stop() })
      redisEnv = { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }
    }
    const origin = await snsHost(t)
    const secret = webhookSecret()
    const receiver = await startReceiver(t, secret)
    const { path, keys } = writeTenants(t, (file) => {
      file.tenants[0]!.webhooks = [{ url: receiver.url, secret, events: ['tenant.sending_paused'] }]
    })
    const { app, mail, logs } = await buildApp(t, {
      TENANTS_FILE: path,
      ...redisEnv,
      WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true',
      SES_FEEDBACK_TOPIC_ARNS: TOPIC,
      REPUTATION_MIN_SENDS: '10',
      REPUTATION_BOUNCE_RATE: '0.5',
      REPUTATION_COMPLAINT_RATE: 'off'
    })
    const dispatch = async (key: string, email: string, headers: Record<string, string> = {}) =>
      await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(key), ...headers }, payload: { email } })
    const feedback = async (event: object) => {
      const answer = await app.inject({ method: 'POST', url: '/feedback/ses', headers: { 'content-type': 'text/plain; charset=UTF-8', 'x-amz-sns-message-type': 'Notification' }, payload: JSON.stringify(signedEvent(origin, event)) })
      t.equal(answer.statusCode, 200, answer.body)
    }

    const sent: Array<{ email: string, requestId: string }> = []
    for (let index = 0; index < 9; index++) {
      const email = `user${index}@example.com`
      const answer = await dispatch(keys.acmeLive, email)
      t.equal(answer.statusCode, 200)
      sent.push({ email, requestId: answer.json().data.requestId })
    }
    // Sandbox mail and its feedback are no part of the shared reputation.
    const sandbox = await dispatch(keys.acmeTest, 'sandbox@example.com')
    await feedback(sesEvent('Bounce', sandbox.json().data.requestId, 'sandbox@example.com', 'test'))
    for (const { email, requestId } of sent.slice(0, 6)) await feedback(sesEvent('Bounce', requestId, email))
    t.equal((await dispatch(keys.acmeLive, 'tenth@example.com')).statusCode, 200, 'six of nine bounced, below REPUTATION_MIN_SENDS: never paused')
    t.equal(await gauge(app), 0, 'the gauge is 0')

    // The tenth send is in: the seventh bounce makes 7 of 10, past 0.5 with the volume.
    await feedback(sesEvent('Bounce', sent[6]!.requestId, sent[6]!.email))
    const paused = await dispatch(keys.acmeLive, 'after@example.com')
    t.same([paused.statusCode, paused.json().code], [403, 'TENANT_SENDING_PAUSED'], 'the next live dispatch is refused')
    // A page's visitor learns nothing of the pause: the answer a suppressed mailbox gets there.
    const mailsBefore = mail.count
    const page = await dispatch(keys.acmeBrowser, 'page@example.com', { origin: 'https://app.acme.test' })
    t.strictSame([page.statusCode, page.json()], [502, { success: false, message: errorCatalog.DELIVERY_FAILED.message, code: 'DELIVERY_FAILED' }], 'a restricted live key gets a failed delivery')
    t.equal(mail.count, mailsBefore, 'and nothing is sent')
    t.notMatch(page.body, /paus|bounce|complain/i)
    t.ok(logs.lines.some((line) => line.includes('live sending of the tenant is paused: nothing sent, answered as a failed delivery') && line.includes('"reason":"sending_paused"')), 'the operator\'s log says why')
    t.equal((await dispatch(keys.acmeTest, 'another@example.com')).statusCode, 200, 'the sandbox keeps working')
    const { email: kept, requestId: keptId } = sent[8]!
    const verify = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: keptId, userGuess: mail.codeFor(kept) } })
    t.equal(verify.statusCode, 200, 'a code sent before the pause still verifies')
    t.equal(await gauge(app), 1, 'the gauge is 1')
    await feedback(sesEvent('Bounce', sent[7]!.requestId, sent[7]!.email))
    await receiver.waitFor(() => receiver.verified.length >= 1, 'the tenant.sending_paused webhook')
    t.match(receiver.verified[0]!.payload, { type: 'tenant.sending_paused', data: { tenant: 'acme', mode: 'live', window: '24h', sent: 10, bounced: 7, complained: 0, bounceRate: 0.7, thresholds: { bounceRate: 0.5, complaintRate: null, minSends: 10 } } })
    t.equal(logs.lines.filter((line) => line.includes('tenant live sending paused')).length, 1, 'one warning line')

    if (store === 'memory') {
      const refused = await runCli(['tenants', 'resume', 'acme'], {}).then(() => null, (error: CliFailure) => error)
      t.match(refused?.stderr, /cannot reach: it lifts by itself once the window's rates fall below the thresholds/, 'the CLI says why it cannot resume an in-memory pause')
      t.equal((await dispatch(keys.acmeLive, 'after@example.com')).statusCode, 403, 'and the pause stands')
    } else {
      const resumed = await runCli(['tenants', 'resume', 'acme'], { ...redisEnv, TENANTS_FILE: path })
      t.match(resumed.stdout, /acme: live sending resumed \(paused since /)
      await until('the instance reads the resume', async () => (await dispatch(keys.acmeLive, 'after@example.com')).statusCode === 200, 15_000)
      t.equal(await gauge(app), 0, 'the gauge is back to 0')
    }
    t.equal(receiver.verified.length, 1, 'one webhook per pause')
  })
}

for (const store of ['memory', 'redis'] as const) {
  t.test(`without SES feedback, a partner's POST /recipients/suppress with a live key counts as a bounce; with it, not at all (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const { path, keys } = writeTenants(t)
    for (const withFeedback of [true, false]) {
      // A Redis of each run's own: the two runs' counts must not add up.
      let redisEnv: Record<string, string> = {}
      if (store === 'redis') {
        const redis = await startRedis()
        t.teardown(async () => { await redis.stop() })
        redisEnv = { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }
      }
      const settings = { TENANTS_FILE: path, ...redisEnv, REPUTATION_MIN_SENDS: '4', REPUTATION_BOUNCE_RATE: '0.5' }
      const { app } = await buildApp(t, withFeedback ? { ...settings, SES_FEEDBACK_TOPIC_ARNS: TOPIC } : settings)
      const tenant = withFeedback ? 'SES feedback configured' : 'no SES feedback'
      const post = async (key: string, url: string, email: string) => await app.inject({ method: 'POST', url, headers: bearer(key), payload: { email } })
      for (let index = 0; index < 4; index++) t.equal((await post(keys.acmeLive, '/otp/request', `${tenant.length}-${index}@example.com`)).statusCode, 200)
      // Sandbox reports are no part of the live reputation.
      for (let index = 0; index < 4; index++) t.equal((await post(keys.acmeTest, '/recipients/suppress', `sandbox-${index}@example.com`)).statusCode, 200)
      t.equal((await post(keys.acmeLive, '/otp/request', `${tenant.length}-after-sandbox@example.com`)).statusCode, 200, `${tenant}: sandbox reports pause nothing`)
      for (let index = 0; index < 3; index++) t.equal((await post(keys.acmeLive, '/recipients/suppress', `gone-${index}@example.com`)).statusCode, 200)
      const next = await post(keys.acmeLive, '/otp/request', `${tenant.length}-next@example.com`)
      if (withFeedback) t.equal(next.statusCode, 200, `${tenant}: SES reports the bounces; the partner's reports would count them twice`)
      else t.same([next.statusCode, next.json().code], [403, 'TENANT_SENDING_PAUSED'], `${tenant}: 3 reports of 5 sends reach 0.5`)
      await app.close()
    }
  })
  t.test(`a partner reporting a mailbox already suppressed counts it once (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const { path, keys } = writeTenants(t)
    let redisEnv: Record<string, string> = {}
    if (store === 'redis') {
      const redis = await startRedis()
      t.teardown(async () => { await redis.stop() })
      redisEnv = { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }
    }
    const { app } = await buildApp(t, { TENANTS_FILE: path, ...redisEnv, REPUTATION_MIN_SENDS: '4', REPUTATION_BOUNCE_RATE: '0.5' })
    const post = async (url: string, email: string) => await app.inject({ method: 'POST', url, headers: bearer(keys.acmeLive), payload: { email } })
    for (let index = 0; index < 4; index++) t.equal((await post('/otp/request', `sent-${index}@example.com`)).statusCode, 200)
    // Counted each time, these 3 reports of 4 sends would pause the tenant.
    for (let index = 0; index < 3; index++) t.equal((await post('/recipients/suppress', 'Gone@Example.com')).statusCode, 200)
    t.equal((await post('/otp/request', 'sent-4@example.com')).statusCode, 200, 'one mailbox reported 3 times is one bounce')
    for (const email of ['gone-1@example.com', 'gone-2@example.com']) t.equal((await post('/recipients/suppress', email)).statusCode, 200)
    const next = await post('/otp/request', 'sent-5@example.com')
    t.same([next.statusCode, next.json().code], [403, 'TENANT_SENDING_PAUSED'], 'new mailboxes still count: 3 of 5 sends reach 0.5')
  })
}
