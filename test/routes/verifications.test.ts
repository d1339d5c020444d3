import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { bearer, buildApp, storeEnv, TEST_HMAC_KEYS, TEST_METRICS_TOKEN, writeTenants, type FixtureKeys } from '../helper.js'
import { playHost } from '../support/https-hosts.js'
import { SNS_CERT, SNS_CERT_PATH, SNS_TOPIC, signedFeedback } from '../support/sns.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
import { startReceiver, webhookSecret } from '../support/webhook-receiver.js'
import { startSmtp } from '../support/mail-peers.js'
import { until } from '../support/wait.js'
import type { TenantsFile } from '../../schemas/tenants.js'

interface Harness {
  app: FastifyInstance
  keys: FixtureKeys
  dispatch: (email: string, key?: string) => Promise<string>
  verify: (requestId: string, guess: string, key?: string) => Promise<number>
  /** GET /verifications/{requestId} once every event so far is written. */
  story: (requestId: string, key?: string) => Promise<{ statusCode: number, body: any }>
  code: (email: string) => string
}

async function harness (t: Test, store: 'memory' | 'redis', env: Record<string, string> = {}, tenants?: (file: TenantsFile) => void): Promise<Harness> {
  const { path, keys } = writeTenants(t, tenants)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path, ...await storeEnv(t, store), ...env })
  return {
    app,
    keys,
    code: (email) => mail.codeFor(email),
    async dispatch (email, key = keys.acmeLive) {
      const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })
      t.equal(answer.statusCode, 200, `dispatch to ${email}`)
      return answer.json().data.requestId as string
    },
    async verify (requestId, userGuess, key = keys.acmeLive) {
      return (await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(key), payload: { requestId, userGuess } })).statusCode
    },
    async story (requestId, key = keys.acmeLive) {
      await app.state.verificationLog.flush()
      const answer = await app.inject({ method: 'GET', url: `/verifications/${requestId}`, headers: bearer(key) })
      return { statusCode: answer.statusCode, body: answer.json() }
    }
  }
}

const types = (body: any): string[] => body.data.events.map((event: { type: string }) => event.type)

for (const store of ['memory', 'redis'] as const) {
  t.test(`GET /verifications/{requestId} (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    t.test('a dispatch, two wrong guesses and a right one; the receipt redeemed', async (t) => {
      const h = await harness(t, store)
      const requestId = await h.dispatch('ada@example.com')
      const pending = await h.story(requestId)
      t.equal(pending.statusCode, 200)
      t.match(pending.body.data, { requestId, mode: 'live', state: 'pending', wrongGuesses: 0, eventsOmitted: 0 })
      t.strictSame(types(pending.body), ['requested', 'sent'])
      t.match(pending.body.data.events, [{ keyId: 'acme_live' }, { provider: 'log' }])
      t.equal(Date.parse(pending.body.data.expiresAt) - Date.parse(pending.body.data.createdAt), 600_000, 'the code lives OTP_TTL_SECONDS')
      const code = h.code('ada@example.com')
      const wrong = code === '000000' ? '111111' : '000000'
      t.equal(await h.verify(requestId, wrong), 400)
      t.equal(await h.verify(requestId, 'abc'), 400)
      const failed = await h.story(requestId)
      t.match(failed.body.data, { state: 'failed', wrongGuesses: 2 })
      t.match(failed.body.data.events.slice(2), [{ type: 'wrong_guess', reason: 'wrong_code' }, { type: 'wrong_guess', reason: 'malformed_code' }])
      t.notOk(JSON.stringify(failed.body).includes(wrong), 'never the guess')
      t.notOk(JSON.stringify(failed.body).includes('ada@'), 'never the address')

      const second = await h.dispatch('bo@example.com')
      const answer = await h.app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(h.keys.acmeLive), payload: { requestId: second, userGuess: h.code('bo@example.com') } })
      t.equal(answer.statusCode, 200)
      const verified = await h.story(second)
      t.match(verified.body.data, { state: 'verified', wrongGuesses: 0 })
      t.strictSame(types(verified.body), ['requested', 'sent', 'verified'])
      const redeemed = await h.app.inject({ method: 'POST', url: '/otp/receipts/redeem', headers: bearer(h.keys.acmeLive), payload: { receipt: answer.json().data.receipt, email: 'bo@example.com' } })
      t.equal(redeemed.statusCode, 200)
      t.strictSame(types((await h.story(second)).body), ['requested', 'sent', 'verified', 'receipt_redeemed'])
    })

    t.test('sent through a real SMTP relay: the provider and the Message-ID it was given', async (t) => {
      const peer = await startSmtp(t)
      const h = await harness(t, store, { MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${peer.port}?tls=off`, MAIL_FROM: 'Codes <codes@otp.test>' })
      const requestId = await h.dispatch('gu@example.com')
      const [sent] = (await h.story(requestId)).body.data.events.slice(1)
      t.match(sent, { type: 'sent', provider: 'smtp', messageId: /^<.+@otp\.test>$/ })
      await until('the relay to have parsed the message', () => peer.received.length === 1)
      t.equal(sent.messageId, peer.received[0]?.messageId, 'the Message-ID the relay received')
    })

    t.test('a wrong guess that locks the mailbox', async (t) => {
      const h = await harness(t, store, { LOCKOUT_THRESHOLD: '1' })
      const requestId = await h.dispatch('cy@example.com')
      const code = h.code('cy@example.com')
      t.equal(await h.verify(requestId, code === '000000' ? '111111' : '000000'), 400)
      const locked = await h.story(requestId)
      t.match(locked.body.data, { state: 'locked', wrongGuesses: 1 })
      t.strictSame(types(locked.body), ['requested', 'sent', 'wrong_guess', 'locked'])
    })

    t.test('a delivery that failed (the sandbox\'s simulated rejection)', async (t) => {
      const secret = webhookSecret()
      const receiver = await startReceiver(t, secret)
      const h = await harness(t, store, { WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true' }, (file) => {
        file.tenants[0]!.webhooks = [{ url: receiver.url, secret, events: ['delivery.failed'] }]
      })
      const answer = await h.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(h.keys.acmeTest), payload: { email: 'fail@simulator.invalid' } })
      t.equal(answer.statusCode, 502)
      // The 502 carries no requestId: the backend learns it from the delivery.failed webhook.
      await receiver.waitFor(() => receiver.verified.length >= 1, 'the delivery.failed webhook')
      const requestId = receiver.verified[0]?.payload.data.requestId as string
      const failed = await h.story(requestId, h.keys.acmeTest)
      t.match(failed.body.data, { mode: 'test', state: 'delivery_failed' })
      t.match(failed.body.data.events, [{ type: 'requested', keyId: 'acme_test' }, { type: 'delivery_failed', reason: 'rejected' }])
      t.equal(failed.body.data.events.length, 2, 'nothing was sent')
    })

    t.test('SES feedback through the signed SNS route: delivered, then a bounce', async (t) => {
      const sns = await playHost(t, 'sns.eu-west-1.amazonaws.com', (request, response) => {
        if (request.url === SNS_CERT_PATH) response.writeHead(200).end(SNS_CERT)
        else response.writeHead(404).end()
      })
      const h = await harness(t, store, { SES_FEEDBACK_TOPIC_ARNS: SNS_TOPIC })
      const requestId = await h.dispatch('di@example.com')
      const post = async (body: object): Promise<number> => (await h.app.inject({ method: 'POST', url: '/feedback/ses', headers: { 'content-type': 'text/plain; charset=UTF-8', 'x-amz-sns-message-type': 'Notification' }, payload: JSON.stringify(body) })).statusCode
      t.equal(await post(signedFeedback(sns.origin, requestId, 'di@example.com', 'Delivery', { delivery: { recipients: ['di@example.com'] } })), 200)
      t.equal(await post(signedFeedback(sns.origin, requestId, 'di@example.com', 'Bounce', { bounce: { bounceType: 'Permanent', bouncedRecipients: [{ emailAddress: 'di@example.com' }] } })), 200)
      t.equal(await post(signedFeedback(sns.origin, requestId, 'di@example.com', 'Complaint', { complaint: { complainedRecipients: [{ emailAddress: 'di@example.com' }] } })), 200)
      const story = await h.story(requestId)
      t.match(story.body.data.events.slice(2), [{ type: 'delivered' }, { type: 'bounced', bounceType: 'permanent' }, { type: 'complained' }])
      t.equal(story.body.data.state, 'pending', 'feedback tells what the mail did, not the code')
    })

    t.test('a flood of dispatches from the tenant\'s page forgets none of its backend\'s stories', async (t) => {
      const h = await harness(t, store, { VERIFICATION_LOG_MAX_PER_TENANT: '2' })
      const backend = await h.dispatch('gil@example.com')
      const fromPage: string[] = []
      for (let i = 0; i < 4; i++) {
        const answer = await h.app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(h.keys.acmeBrowser), origin: 'https://app.acme.test' }, payload: { email: `page${i}@example.com` } })
        t.equal(answer.statusCode, 200, `page dispatch ${i}`)
        fromPage.push(answer.json().data.requestId as string)
      }
      t.equal((await h.story(backend)).statusCode, 200, 'the backend\'s story stays')
      t.strictSame(await Promise.all(fromPage.map(async (id) => (await h.story(id)).statusCode)), [404, 404, 404, 200], 'the page keeps half the cap: its most recent')
      t.match((await h.story(fromPage[3] as string)).body.data.events, [{ type: 'requested', keyId: 'acme_browser' }, { type: 'sent' }])
    })

    t.test('one identical 404 for unknown, malformed, another tenant\'s and the other mode\'s requestId; restricted keys refused', async (t) => {
      const h = await harness(t, store)
      const live = await h.dispatch('ed@example.com')
      const sandbox = await h.dispatch('ed@example.com', h.keys.acmeTest)
      t.equal((await h.story(live)).statusCode, 200)
      t.equal((await h.story(sandbox, h.keys.acmeTest)).statusCode, 200)
      const answers = [
        await h.story('unknown-request-id-0000000000'),
        await h.story('not*well~formed'),
        await h.story('x'.repeat(65)),
        await h.story('x'.repeat(300)),
        await h.story(sandbox),
        await h.story(live, h.keys.acmeTest),
        await h.story(sandbox, h.keys.globexTest)
      ]
      t.strictSame(answers, answers.map(() => ({ statusCode: 404, body: { success: false, message: 'Not found', code: 'NOT_FOUND' } })))
      const browser = await h.app.inject({ method: 'GET', url: `/verifications/${live}`, headers: { ...bearer(h.keys.acmeBrowser), origin: 'https://app.acme.test' } })
      t.same([browser.statusCode, browser.json().code], [403, 'KEY_NOT_PERMITTED'])
    })
  })
}

t.test('a log Redis refuses to write changes no answer: dispatch and verify as ever, the lost events counted', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const admin = await connectFailFast(redis.url)
  t.teardown(() => { admin.disconnect() })
  // A user that may touch every key of the service but the verification log's.
  await admin.call('ACL', 'SETUSER', 'nolog', 'on', '>nolog-password', '+@all', '~otp:*', '~rl:*', '~quota:*', '~lockout:*', '~suppressed:*', '~idem:*', '~receipt*', '~recipient-tag*', '~sandbox*', '~webhooks:*', '~feedback:*')
  const { path, keys } = writeTenants(t)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url.replace('redis://', 'redis://nolog:nolog-password@'), OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'fe@example.com' } })
  t.equal(sent.statusCode, 200, 'dispatched')
  const { requestId } = sent.json().data
  const verified = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess: mail.codeFor('fe@example.com') } })
  t.equal(verified.statusCode, 200, 'verified')
  await app.state.verificationLog.flush()
  t.equal(app.state.verificationLog.dropped(), 3, 'requested, sent and verified: lost and counted')
  t.equal((await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })).body.match(/^email_otp_verification_log_dropped_total (\d+)/m)?.[1], '3', 'on /metrics')
  const story = await app.inject({ method: 'GET', url: `/verifications/${String(requestId)}`, headers: bearer(keys.acmeLive) })
  t.equal(story.statusCode, 503, 'reading what cannot be read is the store unavailable, not a 404 or a 500')
})
