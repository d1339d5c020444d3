import { createSign, randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { globalAgent, createServer } from 'node:https'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { startReceiver, webhookSecret } from '../support/webhook-receiver.js'

const KEY = readFileSync(new URL('../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')
const CERT = readFileSync(new URL('../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')
const TOPIC = 'arn:aws:sns:eu-west-1:123456789012:ses-events'
const OTHER_TOPIC = 'arn:aws:sns:eu-west-1:123456789012:someone-else'

// The loopback certificate server's TLS certificate is the test's own: trust it in this process
// only. sns-validator fetches with the global agent.
globalAgent.options.ca = CERT

/** A loopback HTTPS server playing SNS: it serves the signing certificate and counts subscription confirmations. */
async function startSnsHost (t: Test): Promise<{ origin: string, confirmations: string[], certFetches: string[] }> {
  const confirmations: string[] = []
  const certFetches: string[] = []
  const server = createServer({ key: KEY, cert: CERT }, (request, response) => {
    if (request.url?.endsWith('.pem') === true) certFetches.push(request.url)
    if (request.url === '/SimpleNotificationService-test.pem') {
      response.writeHead(200, { 'content-type': 'application/x-pem-file' }).end(CERT)
      return
    }
    if (request.url?.startsWith('/confirm') === true) {
      confirmations.push(request.url)
      response.writeHead(200).end('<ConfirmSubscriptionResponse/>')
      return
    }
    response.writeHead(404).end()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => { server.closeAllConnections(); server.close(); await once(server, 'close') })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  return { origin: `https://127.0.0.1:${address.port}`, confirmations, certFetches }
}

type Sns = Record<string, string>

/** Signs an SNS message as SNS does: the listed fields, `name\nvalue\n`, RSA with SHA1 (v1) or SHA256 (v2). */
function sign (message: Sns, version: '1' | '2' = '2'): Sns {
  const fields = message.Type === 'Notification'
    ? ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type']
    : ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type']
  const signer = createSign(version === '1' ? 'RSA-SHA1' : 'RSA-SHA256')
  for (const field of fields) if (message[field] !== undefined) signer.update(`${field}\n${message[field]}\n`)
  return { ...message, SignatureVersion: version, Signature: signer.sign(KEY, 'base64') }
}

function notification (origin: string, event: object, overrides: Sns = {}): Sns {
  return {
    Type: 'Notification',
    MessageId: randomUUID(),
    TopicArn: TOPIC,
    Message: JSON.stringify(event),
    Timestamp: new Date().toISOString(),
    SigningCertURL: `${origin}/SimpleNotificationService-test.pem`,
    ...overrides
  }
}

function sesEvent (eventType: string, requestId: string, address: string, details: object): object {
  return {
    eventType,
    mail: { messageId: 'ses-1', destination: [address], tags: { tenant: ['acme'], mode: ['live'], requestId: [requestId] } },
    ...details
  }
}

async function post (app: FastifyInstance, body: unknown, contentType = 'text/plain; charset=UTF-8') {
  return await app.inject({ method: 'POST', url: '/feedback/ses', headers: { 'content-type': contentType, 'x-amz-sns-message-type': 'Notification' }, payload: typeof body === 'string' ? body : JSON.stringify(body) })
}

async function metric (app: FastifyInstance, outcome: string): Promise<number> {
  return (await app.metrics.registry.getSingleMetric('email_otp_ses_feedback_total')?.get())?.values.find((value) => value.labels.outcome === outcome)?.value ?? 0
}

t.test('SNS feedback: signed SES events become webhooks and suppressions; anything unsigned, mis-signed, stale or foreign changes nothing', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const sns = await startSnsHost(t)
  const secret = webhookSecret()
  const receiver = await startReceiver(t, secret)
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.webhooks = [{ url: receiver.url, secret, events: ['delivery.delivered', 'delivery.delayed', 'delivery.bounced', 'delivery.complained'] }]
  })
  const { app, logs } = await buildApp(t, {
    TENANTS_FILE: path,
    REDIS_URL: redis.url,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true',
    SES_FEEDBACK_TOPIC_ARNS: TOPIC,
    SNS_SIGNING_CERT_URL_PATTERN: `^${sns.origin.replaceAll('.', '\\.')}/SimpleNotificationService-[a-z]+\\.pem$`
  })
  const dispatch = async (email: string) => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email } })
  const requestId = (await dispatch('kim@example.com')).json().data.requestId as string

  // Subscription: confirmed for the listed topic only.
  const subscription = (topic: string): Sns => sign({
    Type: 'SubscriptionConfirmation',
    MessageId: randomUUID(),
    TopicArn: topic,
    Token: 'tok',
    Message: 'confirm',
    SubscribeURL: `${sns.origin}/confirm?Token=tok`,
    Timestamp: new Date().toISOString(),
    SigningCertURL: `${sns.origin}/SimpleNotificationService-test.pem`
  })
  const confirmed = await post(app, subscription(TOPIC))
  t.same([confirmed.statusCode, confirmed.json().message], [200, 'confirmed'])
  t.equal(sns.confirmations.length, 1, 'SubscribeURL was fetched')
  const foreign = await post(app, subscription(OTHER_TOPIC))
  t.same([foreign.statusCode, foreign.json().code], [403, 'SNS_TOPIC_NOT_ALLOWED'])
  t.equal(sns.confirmations.length, 1, 'another topic is not confirmed')

  // Refusals first: none of them may change anything for eve.
  const eve = sesEvent('Bounce', requestId, 'eve@example.com', { bounce: { bounceType: 'Permanent', bouncedRecipients: [{ emailAddress: 'eve@example.com' }] } })
  const unsigned = notification(sns.origin, eve)
  t.same((await post(app, unsigned)).json().code, 'SNS_MESSAGE_INVALID', 'unsigned')
  const tampered = { ...sign(notification(sns.origin, eve)), Message: JSON.stringify({ ...eve, tampered: true }) }
  t.same((await post(app, tampered)).json().code, 'SNS_SIGNATURE_INVALID', 'signature over other content')
  const otherKey = { ...sign(notification(sns.origin, eve)), Signature: Buffer.alloc(256, 1).toString('base64') }
  t.same((await post(app, otherKey)).json().code, 'SNS_SIGNATURE_INVALID', 'a signature the certificate does not verify')
  t.same((await post(app, sign(notification(sns.origin, eve, { TopicArn: OTHER_TOPIC })))).json().code, 'SNS_TOPIC_NOT_ALLOWED', 'another topic')
  t.same((await post(app, sign(notification(sns.origin, eve, { Timestamp: new Date(Date.now() - 61 * 60_000).toISOString() })))).json().code, 'SNS_MESSAGE_STALE', 'older than an hour')
  t.same((await post(app, sign(notification(sns.origin, eve, { SigningCertURL: 'https://evil.example/SimpleNotificationService-test.pem' })))).json().code, 'SNS_CERT_URL_NOT_ALLOWED', 'a certificate from elsewhere')
  t.same((await post(app, '{not json')).json().code, 'SNS_MESSAGE_INVALID', 'not JSON')
  const missing = await post(app, sign(notification(sns.origin, eve, { SigningCertURL: `${sns.origin}/SimpleNotificationService-missing.pem` })))
  t.same([missing.statusCode, missing.json().code], [503, 'UNAVAILABLE'], 'a certificate that cannot be fetched: SNS retries later')
  // Made-up certificate URLs on SNS's host: a failed URL is not fetched again for a minute,
  // and at most ten new URLs a minute are fetched at all, whatever a stranger sends.
  const fetchesBefore = sns.certFetches.length
  t.equal((await post(app, sign(notification(sns.origin, eve, { SigningCertURL: `${sns.origin}/SimpleNotificationService-missing.pem` })))).statusCode, 503)
  t.equal(sns.certFetches.length, fetchesBefore, 'a URL that just failed is not fetched again')
  for (let index = 0; index < 30; index++) {
    const made = await post(app, sign(notification(sns.origin, eve, { SigningCertURL: `${sns.origin}/SimpleNotificationService-madeup${String.fromCharCode(97 + index % 26)}${String.fromCharCode(97 + Math.floor(index / 26))}.pem` })))
    t.same([made.statusCode, made.json().code], [503, 'UNAVAILABLE'], `made-up certificate URL ${index}`)
  }
  t.ok(sns.certFetches.length - fetchesBefore <= 10, `at most ten new certificate URLs fetched in a minute (${sns.certFetches.length - fetchesBefore} of 30)`)
  t.ok(sns.certFetches.length - fetchesBefore >= 1, 'new certificate URLs are still fetched')
  t.equal((await post(app, sign(notification(sns.origin, eve, { TopicArn: OTHER_TOPIC })))).statusCode, 403)
  t.equal(await metric(app, 'SNS_SIGNATURE_INVALID'), 2, 'refusals are counted by cause')
  t.equal((await dispatch('eve@example.com')).statusCode, 200, 'no refused message suppressed anyone')

  // A permanent bounce (SignatureVersion 2): webhook and suppression, once.
  const bounce = sign(notification(sns.origin, sesEvent('Bounce', requestId, 'kim@example.com', { bounce: { bounceType: 'Permanent', bouncedRecipients: [{ emailAddress: 'kim@example.com' }] } })))
  t.same((await post(app, bounce)).json().message, 'handled')
  t.same((await post(app, bounce)).json().message, 'duplicate', 'SNS delivering twice has one effect')
  const suppressed = await dispatch('Kim+again@Example.com')
  t.same([suppressed.statusCode, suppressed.json().code], [422, 'RECIPIENT_SUPPRESSED'], 'the mailbox is suppressed, every spelling')

  // Delivery (SignatureVersion 1), delay, transient bounce, complaint.
  const lu = (await dispatch('lu@example.com')).json().data.requestId as string
  t.same((await post(app, sign(notification(sns.origin, sesEvent('Delivery', lu, 'lu@example.com', { delivery: { recipients: ['lu@example.com'] } })), '1'))).json().message, 'handled', 'SignatureVersion 1')
  t.same((await post(app, sign(notification(sns.origin, sesEvent('DeliveryDelay', lu, 'lu@example.com', { deliveryDelay: { delayedRecipients: [{ emailAddress: 'lu@example.com' }] } }))))).json().message, 'handled')
  t.same((await post(app, sign(notification(sns.origin, sesEvent('Bounce', lu, 'lu@example.com', { bounce: { bounceType: 'Transient', bouncedRecipients: [{ emailAddress: 'lu@example.com' }] } }))))).json().message, 'handled')
  t.equal((await dispatch('lu@example.com')).statusCode, 200, 'a transient bounce suppresses nothing')
  const ola = (await dispatch('ola@example.com')).json().data.requestId as string
  t.same((await post(app, sign(notification(sns.origin, sesEvent('Complaint', ola, 'ola@example.com', { complaint: { complainedRecipients: [{ emailAddress: 'ola@example.com' }] } }))), 'application/json')).json().message, 'handled')
  t.equal((await dispatch('ola@example.com')).json().code, 'RECIPIENT_SUPPRESSED', 'a complaint suppresses')
  // Events that do not map to a dispatch of ours are ignored: unknown tenant, no tags, another recipient.
  const stray = sesEvent('Bounce', lu, 'lu@example.com', { bounce: { bounceType: 'Permanent', bouncedRecipients: [{ emailAddress: 'lu@example.com' }] } }) as { mail: { tags: object } }
  t.same((await post(app, sign(notification(sns.origin, { ...stray, mail: { ...stray.mail, tags: { tenant: ['nobody'], mode: ['live'], requestId: [lu] } } })))).json().message, 'ignored')
  t.same((await post(app, sign(notification(sns.origin, sesEvent('Bounce', lu, 'lu@example.com', { bounce: { bounceType: 'Permanent', bouncedRecipients: [{ emailAddress: 'someone@else.example' }] } }))))).json().message, 'ignored', 'a recipient the message was not sent to')
  t.equal((await dispatch('lu@example.com')).statusCode, 200)

  await receiver.waitFor(() => receiver.verified.length >= 5, 'five webhooks')
  const events = receiver.verified.map((hook) => hook.payload as { type: string, data: Record<string, unknown> })
  t.same(events.map((event) => event.type).sort(), ['delivery.bounced', 'delivery.bounced', 'delivery.complained', 'delivery.delayed', 'delivery.delivered'])
  const permanent = events.find((event) => event.type === 'delivery.bounced' && event.data.bounceType === 'permanent')
  t.match(permanent?.data, { tenant: 'acme', mode: 'live', requestId, addressHash: /^[A-Za-z0-9_-]{22}$/ })
  t.match(events.find((event) => event.type === 'delivery.bounced' && event.data.requestId === lu)?.data, { bounceType: 'transient' })
  for (const hook of receiver.verified) t.notMatch(JSON.stringify(hook.payload), /@/, `${(hook.payload as { type: string }).type}: no address in the webhook`)
  t.notMatch(logs.text, /kim@example\.com|lu@example\.com/, 'no address in the logs')
})
