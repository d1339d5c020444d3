import { createSign, randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { bearer, buildApp, storeEnv, writeTenants } from '../helper.js'
import { playHost } from '../support/https-hosts.js'
import { redisTestOptions } from '../support/redis.js'
import { startReceiver, webhookSecret } from '../support/webhook-receiver.js'

const KEY = readFileSync(new URL('../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')
const CERT = readFileSync(new URL('../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')
/** Someone else's key pair: a certificate anyone can serve from a host of their own. */
const ATTACKER_KEY = readFileSync(new URL('../fixtures/sns/attacker-key.pem', import.meta.url), 'utf8')
const ATTACKER_CERT = readFileSync(new URL('../fixtures/sns/attacker-cert.pem', import.meta.url), 'utf8')
const TOPIC = 'arn:aws:sns:eu-west-1:123456789012:ses-events'
const OTHER_TOPIC = 'arn:aws:sns:eu-west-1:123456789012:someone-else'
/** The certificate each host serves, as SNS names its own. */
const PEM = '/SimpleNotificationService-0123456789abcdef.pem'

interface CertificateHost { origin: string, confirmations: string[], certFetches: string[] }

/**
 * `hostname` played by a loopback HTTPS server (test/support/https-hosts.ts) that serves
 * `signingCert` at PEM, answers subscription confirmations, redirects the paths of `redirects`,
 * and counts every certificate fetch and confirmation; any other .pem is 404.
 */
async function startCertificateHost (t: Test, hostname: string, signingCert: string, redirects: Record<string, string> = {}): Promise<CertificateHost> {
  const confirmations: string[] = []
  const certFetches: string[] = []
  const host = await playHost(t, hostname, (request, response) => {
    const path = request.url ?? ''
    if (path.endsWith('.pem')) certFetches.push(path)
    if (path === PEM) {
      response.writeHead(200, { 'content-type': 'application/x-pem-file' }).end(signingCert)
      return
    }
    const redirect = redirects[path]
    if (redirect !== undefined) {
      response.writeHead(302, { location: redirect }).end()
      return
    }
    if (path.startsWith('/confirm')) {
      confirmations.push(path)
      response.writeHead(200).end('<ConfirmSubscriptionResponse/>')
      return
    }
    response.writeHead(404).end()
  })
  return { origin: host.origin, confirmations, certFetches }
}

/** An SNS message as a body may carry it: values of any JSON type, fields of any spelling. */
type Sns = Record<string, unknown>

/**
 * Signs an SNS message as SNS does: the fields of its type, `name\nvalue\n`, RSA with SHA1 (v1)
 * or SHA256 (v2). A value that is not a string is written as JavaScript writes it, as a lenient
 * verifier would read it back.
 */
function sign (message: Sns, version: '1' | '2' = '2', key = KEY): Sns {
  const fields = message.Type === 'Notification'
    ? ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type']
    : ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type']
  const signer = createSign(version === '1' ? 'RSA-SHA1' : 'RSA-SHA256')
  for (const field of fields) if (message[field] !== undefined && message[field] !== null) signer.update(`${field}\n${String(message[field])}\n`)
  return { ...message, SignatureVersion: version, Signature: signer.sign(key, 'base64') }
}

/** A Notification as SNS sends it: UnsubscribeURL is there, unsigned. */
function notification (origin: string, event: object, overrides: Sns = {}): Sns {
  return {
    Type: 'Notification',
    MessageId: randomUUID(),
    TopicArn: TOPIC,
    Message: JSON.stringify(event),
    Timestamp: new Date().toISOString(),
    SigningCertURL: `${origin}${PEM}`,
    UnsubscribeURL: `${origin}/?Action=Unsubscribe&SubscriptionArn=${TOPIC}:${randomUUID()}`,
    ...overrides
  }
}

function subscription (origin: string, topic = TOPIC, overrides: Sns = {}): Sns {
  return {
    Type: 'SubscriptionConfirmation',
    MessageId: randomUUID(),
    TopicArn: topic,
    Token: 'tok',
    Message: 'confirm',
    SubscribeURL: `${origin}/confirm?Token=tok`,
    Timestamp: new Date().toISOString(),
    SigningCertURL: `${origin}${PEM}`,
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

function permanentBounce (requestId: string, address: string): object {
  return sesEvent('Bounce', requestId, address, { bounce: { bounceType: 'Permanent', bouncedRecipients: [{ emailAddress: address }] } })
}

async function post (app: FastifyInstance, body: unknown, contentType = 'text/plain; charset=UTF-8') {
  return await app.inject({ method: 'POST', url: '/feedback/ses', headers: { 'content-type': contentType, 'x-amz-sns-message-type': 'Notification' }, payload: typeof body === 'string' ? body : JSON.stringify(body) })
}

async function metric (app: FastifyInstance, outcome: string): Promise<number> {
  return (await app.metrics.registry.getSingleMetric('email_otp_ses_feedback_total')?.get())?.values.find((value) => value.labels.outcome === outcome)?.value ?? 0
}

/** `^https://sns\.eu-west-1\.amazonaws\.com` and what follows, as an operator would write a looser pattern. */
function hostPattern (host: CertificateHost, rest: string): string {
  return `^${host.origin.replaceAll('.', '\\.')}${rest}`
}

for (const store of ['memory', 'redis'] as const) {
  t.test(`SNS feedback: signed SES events become webhooks and suppressions; anything unsigned, mis-signed, stale or foreign changes nothing (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const env = await storeEnv(t, store)
    // SNS's own certificate host, under the default SNS_SIGNING_CERT_URL_PATTERN.
    const sns = await startCertificateHost(t, 'sns.eu-west-1.amazonaws.com', CERT)
    const secret = webhookSecret()
    const receiver = await startReceiver(t, secret)
    const { path, keys } = writeTenants(t, (file) => {
      file.tenants[0]!.webhooks = [{ url: receiver.url, secret, events: ['delivery.delivered', 'delivery.delayed', 'delivery.bounced', 'delivery.complained'] }]
    })
    const { app, logs } = await buildApp(t, {
      TENANTS_FILE: path,
      ...env,
      WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true',
      SES_FEEDBACK_TOPIC_ARNS: TOPIC
    })
    const dispatch = async (email: string) => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email } })
    const requestId = (await dispatch('kim@example.com')).json().data.requestId as string

    // Subscription: confirmed for the listed topic only.
    const confirmed = await post(app, sign(subscription(sns.origin)))
    t.same([confirmed.statusCode, confirmed.json().message], [200, 'confirmed'])
    t.equal(sns.confirmations.length, 1, 'SubscribeURL was fetched')
    const foreign = await post(app, sign(subscription(sns.origin, OTHER_TOPIC)))
    t.same([foreign.statusCode, foreign.json().code], [403, 'SNS_TOPIC_NOT_ALLOWED'])
    t.equal(sns.confirmations.length, 1, 'another topic is not confirmed')

    // Refusals first: none of them may change anything for eve.
    const eve = permanentBounce(requestId, 'eve@example.com')
    const unsigned = notification(sns.origin, eve)
    t.same((await post(app, unsigned)).json().code, 'SNS_MESSAGE_INVALID', 'unsigned')
    const tampered = { ...sign(notification(sns.origin, eve)), Message: JSON.stringify({ ...eve, tampered: true }) }
    t.same((await post(app, tampered)).json().code, 'SNS_SIGNATURE_INVALID', 'signature over other content')
    const otherKey = { ...sign(notification(sns.origin, eve)), Signature: Buffer.alloc(256, 1).toString('base64') }
    t.same((await post(app, otherKey)).json().code, 'SNS_SIGNATURE_INVALID', 'a signature the certificate does not verify')
    t.same((await post(app, sign(notification(sns.origin, eve, { TopicArn: OTHER_TOPIC })))).json().code, 'SNS_TOPIC_NOT_ALLOWED', 'another topic')
    t.same((await post(app, sign(notification(sns.origin, eve, { Timestamp: new Date(Date.now() - 61 * 60_000).toISOString() })))).json().code, 'SNS_MESSAGE_STALE', 'older than an hour')
    t.same((await post(app, sign(notification(sns.origin, eve, { SigningCertURL: `https://evil.example${PEM}` })))).json().code, 'SNS_CERT_URL_NOT_ALLOWED', 'a certificate from elsewhere')
    t.same((await post(app, '{not json')).json().code, 'SNS_MESSAGE_INVALID', 'not JSON')
    const missing = await post(app, sign(notification(sns.origin, eve, { SigningCertURL: `${sns.origin}/SimpleNotificationService-dead.pem` })))
    t.same([missing.statusCode, missing.json().code], [503, 'UNAVAILABLE'], 'a certificate that cannot be fetched: SNS retries later')
    // Made-up certificate URLs on SNS's host: a failed URL is not fetched again for a minute,
    // and one source starts three fetches (the confirmation's certificate was one), then one a minute.
    const fetchesBefore = sns.certFetches.length
    t.equal((await post(app, sign(notification(sns.origin, eve, { SigningCertURL: `${sns.origin}/SimpleNotificationService-dead.pem` })))).statusCode, 503)
    t.equal(sns.certFetches.length, fetchesBefore, 'a URL that just failed is not fetched again')
    const madeUp = []
    for (let index = 0; index < 30; index++) {
      const made = await post(app, sign(notification(sns.origin, eve, { SigningCertURL: `${sns.origin}/SimpleNotificationService-ffff${index.toString(16)}.pem` })))
      madeUp.push([made.statusCode, made.json().code, Number(made.headers['retry-after'] ?? 0) > 0 && Number(made.headers['retry-after']) <= 60])
    }
    t.same(madeUp[0], [503, 'UNAVAILABLE', false], 'the source\'s third new URL is fetched (and fails)')
    t.same(madeUp.slice(1), Array.from({ length: 29 }, () => [429, 'RATE_LIMITED', true]), 'the others are refused 429 with the wait for the next fetch (at most a minute)')
    t.equal(sns.certFetches.length - fetchesBefore, 1, 'and not fetched')
    t.equal((await post(app, sign(notification(sns.origin, eve, { TopicArn: OTHER_TOPIC })))).statusCode, 403)
    t.equal(await metric(app, 'SNS_SIGNATURE_INVALID'), 2, 'refusals are counted by cause')
    t.equal((await dispatch('eve@example.com')).statusCode, 200, 'no refused message suppressed anyone')

    // A permanent bounce (SignatureVersion 2): webhook and suppression, once.
    const bounce = sign(notification(sns.origin, permanentBounce(requestId, 'kim@example.com')))
    t.same((await post(app, bounce)).json().message, 'handled')
    t.same((await post(app, bounce)).json().message, 'duplicate', 'SNS delivering twice has one effect')
    const suppressed = await dispatch('Kim+again@Example.com')
    t.same([suppressed.statusCode, suppressed.json().code], [422, 'RECIPIENT_SUPPRESSED'], 'the mailbox is suppressed, every spelling')

    // Delivery (SignatureVersion 1), delay, transient bounce, complaint.
    const lu = (await dispatch('lu@example.com')).json().data.requestId as string
    t.same((await post(app, sign(notification(sns.origin, sesEvent('Delivery', lu, 'lu@example.com', { delivery: { recipients: ['lu@example.com'] } }), { Subject: 'Amazon SES Email Event Notification' }), '1'))).json().message, 'handled', 'SignatureVersion 1, with a Subject')
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
    // Message attributes, as SNS passes on a publisher's (SES sets none): ten are read past.
    const attributes = (count: number): Sns => Object.fromEntries(Array.from({ length: count }, (_, index) => [`attribute.${index}`, { Type: 'String', Value: String(index) }]))
    const withAttributes = (count: number): Sns => sign(notification(sns.origin, sesEvent('Delivery', lu, 'lu@example.com', { delivery: { recipients: ['someone@else.example'] } }), { MessageAttributes: attributes(count) }))
    t.same((await post(app, withAttributes(10))).json().message, 'ignored', 'a signed message with ten attributes is read')
    const eleven = await post(app, withAttributes(11))
    t.same([eleven.statusCode, eleven.json().code], [400, 'SNS_MESSAGE_INVALID'], 'eleven are not an SNS envelope')

    await receiver.waitFor(() => receiver.verified.length >= 5, 'five webhooks')
    const events = receiver.verified.map((hook) => hook.payload as { type: string, data: Record<string, unknown> })
    t.same(events.map((event) => event.type).sort(), ['delivery.bounced', 'delivery.bounced', 'delivery.complained', 'delivery.delayed', 'delivery.delivered'])
    const permanent = events.find((event) => event.type === 'delivery.bounced' && event.data.bounceType === 'permanent')
    t.match(permanent?.data, { tenant: 'acme', mode: 'live', requestId, addressHash: /^[A-Za-z0-9_-]{22}$/ })
    t.match(events.find((event) => event.type === 'delivery.bounced' && event.data.requestId === lu)?.data, { bounceType: 'transient' })
    for (const hook of receiver.verified) t.notMatch(JSON.stringify(hook.payload), /@/, `${(hook.payload as { type: string }).type}: no address in the webhook`)
    t.notMatch(logs.text, /kim@example\.com|lu@example\.com/, 'no address in the logs')
    const counted = (await app.metrics.registry.getSingleMetric('email_otp_ses_events_total')?.get())?.values.filter((value) => value.labels.tenant === 'acme') ?? []
    t.same(Object.fromEntries(counted.map((value) => [value.labels.event, value.value])), { delivered: 1, delayed: 1, bounced_permanent: 1, bounced_transient: 1, complained: 1 }, 'each handled event counted once for its tenant, the duplicate and the ignored ones not at all')
  })
}

t.test('every answer is counted: refusals before the field check under their own outcomes, the shape scan\'s as `malformed`', async (t) => {
  const { path } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, SES_FEEDBACK_TOPIC_ARNS: TOPIC })
  const outcomes = async (): Promise<Record<string, number>> => Object.fromEntries(((await app.metrics.registry.getSingleMetric('email_otp_ses_feedback_total')?.get())?.values ?? []).map((value) => [value.labels.outcome, value.value]))
  const envelope = { Type: 'Notification', MessageId: 'm1', TopicArn: OTHER_TOPIC, Message: 'x', Timestamp: new Date().toISOString(), SignatureVersion: '1', Signature: 's', SigningCertURL: `https://sns.eu-west-1.amazonaws.com${PEM}` }
  // The red team's body: an SNS envelope of another topic and 22,500 made-up fields, 259 KB.
  const manyFields = JSON.stringify({ ...envelope, ...Object.fromEntries(Array.from({ length: 22_500 }, (_, index) => [`k${index}`, ''])) })
  const answers: Array<[string, number, string]> = []
  for (const [what, body, contentType] of [
    ['empty', '', 'text/plain'],
    ['[', '[', 'text/plain'],
    ['x', 'x', 'text/plain'],
    ['four deep', '{"a":{"b":{"c":{"d":"e"}}}}', 'text/plain'],
    ['22,500 made-up fields', manyFields, 'text/plain'],
    ['a second spelling', JSON.stringify({ ...envelope, SigningCertUrl: 'https://evil.example/x.pem' }), 'application/json'],
    ['300 KB', `"${'x'.repeat(300_000)}"`, 'text/plain'],
    ['XML', '<Notification/>', 'application/xml'],
    ['the field check', '{"Type":"Notification"}', 'text/plain'],
    ['another topic', JSON.stringify(envelope), 'text/plain']
  ] as const) {
    const answer = await post(app, body, contentType)
    answers.push([what, answer.statusCode, answer.json().code])
  }
  t.same(answers, [
    ['empty', 400, 'SNS_MESSAGE_INVALID'],
    ['[', 400, 'SNS_MESSAGE_INVALID'],
    ['x', 400, 'SNS_MESSAGE_INVALID'],
    ['four deep', 400, 'SNS_MESSAGE_INVALID'],
    ['22,500 made-up fields', 400, 'SNS_MESSAGE_INVALID'],
    ['a second spelling', 400, 'SNS_MESSAGE_INVALID'],
    ['300 KB', 413, 'PAYLOAD_TOO_LARGE'],
    ['XML', 415, 'UNSUPPORTED_MEDIA_TYPE'],
    ['the field check', 400, 'SNS_MESSAGE_INVALID'],
    ['another topic', 403, 'SNS_TOPIC_NOT_ALLOWED']
  ], 'each refused, the made-up fields before they are parsed (not 403)')
  t.same(await outcomes(), { malformed: 6, PAYLOAD_TOO_LARGE: 1, UNSUPPORTED_MEDIA_TYPE: 1, SNS_MESSAGE_INVALID: 1, SNS_TOPIC_NOT_ALLOWED: 1 }, 'each answer counted once, under its own outcome')
})

/**
 * The red team's forgery and its whole class. A message is trusted only for the fields SNS
 * signed, read under SNS's own spelling, with the certificate URL that was checked: a verifier
 * that renames (`SigningCertUrl`, `UnsubscribeUrl`), drops (`Subject: null`), adds
 * (`SubscribeURL` in a Notification) or coerces (`Subject: 42`) fields, or reads a URL with
 * another parser than the one that fetches it, verifies something other than what was
 * checked. None of these may suppress the victim, send a webhook or fetch the attacker's
 * certificate.
 */
for (const store of ['memory', 'redis'] as const) {
  t.test(`forged SNS feedback: second spellings, renamed, defaulted or coerced fields and URLs two parsers read apart are refused before anything happens (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const env = await storeEnv(t, store)
    const evil = await startCertificateHost(t, 'evil.example', ATTACKER_CERT)
    const evilCert = `${evil.origin}${PEM}`
    const sns = await startCertificateHost(t, 'sns.eu-west-1.amazonaws.com', CERT, { '/SimpleNotificationService-00ff.pem': evilCert })
    const secret = webhookSecret()
    const receiver = await startReceiver(t, secret)
    const { path, keys } = writeTenants(t, (file) => {
      file.tenants[0]!.webhooks = [{ url: receiver.url, secret, events: ['delivery.delivered', 'delivery.delayed', 'delivery.bounced', 'delivery.complained'] }]
    })
    const base = { TENANTS_FILE: path, ...env, WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true', SES_FEEDBACK_TOPIC_ARNS: TOPIC }
    // The default: SNS's own hosts.
    const { app } = await buildApp(t, base)
    // An operator's looser pattern, a prefix of the host, as one might write for a partition of one's own.
    const { app: loose } = await buildApp(t, { ...base, SNS_SIGNING_CERT_URL_PATTERN: hostPattern(sns, '.*\\.pem') })
    // One that names hosts no URL may use, so that only the rules every URL obeys refuse them.
    const { app: anyHost } = await buildApp(t, { ...base, SNS_SIGNING_CERT_URL_PATTERN: 'https://(sns%2eeu-west-1\\.amazonaws\\.com|SNS\\.eu-west-1\\.amazonaws\\.com|127\\.0\\.0\\.1|\\[::1\\]|sns\\.eu-west-1\\.amazonaws\\.com)/(sns/|a+/)?SimpleNotificationService-[0-9a-f]+\\.pem' })
    const dispatch = async (on: FastifyInstance) => await on.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'victim@example.com' } })
    const requestId = (await dispatch(app)).json().data.requestId as string
    const forged = (overrides: Sns): Sns => notification(sns.origin, permanentBounce(requestId, 'victim@example.com'), overrides)
    const refused = async (on: FastifyInstance, body: Sns, code: string, what: string): Promise<void> => {
      const answer = await post(on, body)
      t.same([answer.statusCode, answer.json().code], [code === 'SNS_MESSAGE_INVALID' ? 400 : 403, code], what)
    }

    // The red team's message: the SigningCertURL that is checked names SNS's host, an unsigned
    // SigningCertUrl names the attacker's certificate, and the attacker signed it.
    await refused(app, sign(forged({ SigningCertUrl: evilCert }), '2', ATTACKER_KEY), 'SNS_MESSAGE_INVALID', 'the exact attack: SigningCertUrl beside SigningCertURL')
    await refused(app, sign(forged({ SigningCertUrl: evilCert }), '1', ATTACKER_KEY), 'SNS_MESSAGE_INVALID', 'the same, SignatureVersion 1')
    const { SigningCertURL: _, ...withoutUrl } = forged({ SigningCertUrl: evilCert })
    await refused(app, sign(withoutUrl, '2', ATTACKER_KEY), 'SNS_MESSAGE_INVALID', 'SigningCertUrl alone')
    for (const spelling of ['signingcerturl', 'SIGNINGCERTURL', 'Signing_Cert_URL', 'signingCertURL']) {
      await refused(app, sign(forged({ [spelling]: evilCert }), '2', ATTACKER_KEY), 'SNS_MESSAGE_INVALID', `${spelling} beside SigningCertURL`)
    }

    // Second spellings of other fields, on messages SNS's own key signed: the spelling alone is refused.
    const seconds: Array<[string, unknown]> = [
      ['UnsubscribeUrl', `${evil.origin}/?Action=Unsubscribe`],
      ['subject', 'Bounce'],
      ['SUBJECT', 'Bounce'],
      ['messageId', randomUUID()],
      ['Topicarn', OTHER_TOPIC],
      ['type', 'SubscriptionConfirmation'],
      ['signature', 'AAAA'],
      ['signatureversion', '1'],
      ['message', '{}'],
      ['timestamp', new Date(0).toISOString()],
      ['messageattributes', {}]
    ]
    for (const [spelling, value] of seconds) await refused(app, sign(forged({ [spelling]: value })), 'SNS_MESSAGE_INVALID', `${spelling} beside its SNS spelling`)

    // Defaulted and coerced values: signed as a lenient verifier reads them, refused as not strings.
    await refused(app, sign(forged({ Subject: null })), 'SNS_MESSAGE_INVALID', 'Subject: null (dropped before verifying)')
    await refused(app, sign(forged({ Subject: 42 })), 'SNS_MESSAGE_INVALID', 'Subject: 42 (signed as "42")')
    await refused(app, sign(forged({ Subject: ['Bounce'] })), 'SNS_MESSAGE_INVALID', 'Subject: ["Bounce"] (signed as "Bounce")')
    await refused(app, sign(forged({ Subject: { text: 'Bounce' } })), 'SNS_MESSAGE_INVALID', 'Subject: an object')
    await refused(app, sign(forged({ Subject: '' })), 'SNS_MESSAGE_INVALID', 'Subject: an empty string')
    // Signed fields of another type: SNS never signs SubscribeURL or Token into a Notification.
    const notificationWith = (field: string, value: string): Sns => {
      const message = forged({ [field]: value })
      const signer = createSign('RSA-SHA256')
      for (const name of ['Message', 'MessageId', field, 'Timestamp', 'TopicArn', 'Type']) signer.update(`${name}\n${String(message[name])}\n`)
      return { ...message, SignatureVersion: '2', Signature: signer.sign(KEY, 'base64') }
    }
    await refused(app, notificationWith('SubscribeURL', `${sns.origin}/confirm?Token=x`), 'SNS_MESSAGE_INVALID', 'a Notification with SubscribeURL, signed in')
    await refused(app, notificationWith('Token', 'tok'), 'SNS_MESSAGE_INVALID', 'a Notification with Token')
    // Subscription confirmations: nothing is confirmed.
    await refused(app, sign(subscription(sns.origin, TOPIC, { SubscribeUrl: `${evil.origin}/confirm?Token=tok` })), 'SNS_MESSAGE_INVALID', 'SubscribeUrl beside SubscribeURL')
    await refused(app, sign(subscription(sns.origin, TOPIC, { Token: 7 })), 'SNS_MESSAGE_INVALID', 'Token: 7 (signed as "7")')
    await refused(app, sign(subscription(sns.origin, TOPIC, { Subject: 'unsigned in a confirmation' })), 'SNS_MESSAGE_INVALID', 'a Subject in a subscription confirmation')
    await refused(app, sign({ ...subscription(sns.origin), SubscribeURL: undefined }), 'SNS_MESSAGE_INVALID', 'a subscription confirmation without SubscribeURL')
    t.equal(sns.confirmations.length + evil.confirmations.length, 0, 'no subscription was confirmed')

    // Certificate URLs two parsers read apart, under the operator's loose pattern: the URL is
    // parsed once, and what is checked is what would be fetched.
    const bent: Array<[FastifyInstance, string, string]> = [
      [loose, `${sns.origin}@evil.example${PEM}`, 'credentials: the SNS host as a user name, the attacker\'s as the host'],
      [loose, `${sns.origin}\\@evil.example${PEM}`, 'a backslash, a path to WHATWG'],
      [loose, `${sns.origin}${PEM}?.pem`, 'a query'],
      [loose, `${sns.origin}${PEM}#.pem`, 'a fragment'],
      [loose, `${sns.origin}/x/../SimpleNotificationService-e0.pem`, 'a dot segment'],
      [loose, `${sns.origin}/%2e%2e/SimpleNotificationService-e0.pem`, 'an encoded dot segment'],
      [loose, `${sns.origin}:8443${PEM}`, 'a port'],
      [loose, `${sns.origin}:443${PEM}`, 'port 443 written out'],
      [loose, `${sns.origin}.${PEM}`, 'a trailing dot on the host'],
      [loose, `${sns.origin}.evil.example${PEM}`, 'the SNS host as a prefix of the attacker\'s'],
      [anyHost, 'https://sns%2eeu-west-1.amazonaws.com' + PEM, 'a percent-encoded host'],
      [anyHost, 'https://SNS.eu-west-1.amazonaws.com' + PEM, 'mixed case'],
      [anyHost, 'http://sns.eu-west-1.amazonaws.com' + PEM, 'http'],
      [anyHost, 'https://127.0.0.1/sns' + PEM, 'an IPv4 literal'],
      [anyHost, 'https://0x7f.1/sns' + PEM, 'an IPv4 literal in shorthand'],
      [anyHost, 'https://sns.eu-west-1.amazonaws.com@127.0.0.1/sns' + PEM, 'credentials before an IPv4 literal'],
      [anyHost, 'https://[::1]/sns' + PEM, 'an IPv6 literal'],
      [anyHost, `https://sns.eu-west-1.amazonaws.com/${'a'.repeat(230)}${PEM}`, 'past 256 characters'],
    ]
    for (const [on, url, what] of bent) await refused(on, sign(forged({ SigningCertURL: url }), '2', ATTACKER_KEY), 'SNS_CERT_URL_NOT_ALLOWED', what)
    // SNS's host (played here) answering a redirect to the attacker's: never followed.
    const redirected = await post(app, sign(forged({ SigningCertURL: `${sns.origin}/SimpleNotificationService-00ff.pem` }), '2', ATTACKER_KEY))
    t.same([redirected.statusCode, redirected.json().code], [503, 'UNAVAILABLE'], 'a redirect from the certificate host is a failed fetch')
    t.same(sns.certFetches, ['/SimpleNotificationService-00ff.pem'], 'the certificate host was asked once')
    const long = await post(anyHost, sign(forged({ SigningCertURL: `https://sns.eu-west-1.amazonaws.com/${'a'.repeat(100)}${PEM}` }), '2', ATTACKER_KEY))
    t.same([long.statusCode, long.json().code], [503, 'UNAVAILABLE'], 'a URL under 256 characters the pattern allows is fetched (and not found): the length alone refused the longer one')
    // The default pattern, against the URLs of the report and an S3 bucket named sns.
    for (const url of [
      'https://sns.us-east-1.amazonaws.com\\@evil.example/x.pem',
      'https://evil.example#@sns.us-east-1.amazonaws.com/x.pem',
      'https://sns.us-east-1.amazonaws.com@evil.example/SimpleNotificationService-abc.pem',
      'https://sns.us-east-1.amazonaws.com:8443/SimpleNotificationService-abc.pem',
      'https://SNS.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem',
      'https://sns.s3.amazonaws.com/SimpleNotificationService-abc.pem',
      'https://sns.s3-website-us-east-1.amazonaws.com/SimpleNotificationService-abc.pem',
      'https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-evil.pem',
      'https://sns.eu-west-1.amazonaws.com/certs/SimpleNotificationService-abc.pem',
      'https://evil.example/SimpleNotificationService-abc.pem',
      // SNS's own shape, on another region's host than the topic's (eu-west-1): a far, slow host
      // would let a few strangers hold every fetch in flight.
      'https://sns.ap-southeast-3.amazonaws.com/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem',
      'https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem'
    ]) await refused(app, sign(forged({ SigningCertURL: url }), '2', ATTACKER_KEY), 'SNS_CERT_URL_NOT_ALLOWED', url)

    t.same(evil.certFetches, [], 'the attacker\'s certificate was never fetched')
    for (const on of [app, loose, anyHost]) {
      t.equal(await metric(on, 'handled'), 0, 'no forgery was handled')
      t.equal((await dispatch(on)).statusCode, 200, 'the victim is not suppressed')
    }
    // A genuine event after the forgeries: its webhook is the only one.
    const genuine = await post(app, sign(notification(sns.origin, sesEvent('Delivery', requestId, 'victim@example.com', { delivery: { recipients: ['victim@example.com'] } }))))
    t.same([genuine.statusCode, genuine.json().message], [200, 'handled'], 'a genuine message is still handled')
    await receiver.waitFor(() => receiver.verified.length >= 1, 'the genuine event\'s webhook')
    t.same(receiver.verified.map((hook) => (hook.payload as { type: string }).type), ['delivery.delivered'], 'no webhook for any forgery')
  })
}

const SIDECAR = '127.0.0.6'
const GATEWAY = 'spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account'
/** What the sidecar adds for a caller with an identity (here the ingress gateway's). */
const viaGateway = (client: string): Record<string, string> => ({ 'x-forwarded-client-cert': `By=spiffe://cluster.local/ns/otp/sa/email-otp;Hash=9f86d081;URI=${GATEWAY}`, 'x-forwarded-for': client })

/**
 * Holding the fetches in flight with made-up certificate URLs that SNS's host is slow to answer
 * (here it never answers, until the fetch's 5 s deadline): one caller through the sidecar without
 * an identity (it spends no tokens, being every such caller), or 16 /64s of one IPv6 /48 through
 * the gateway (a /48 is free to have, and holds 65,536 /64s). Each holds one fetch, so SNS's new
 * certificate, asked for from elsewhere meanwhile, is fetched.
 */
for (const store of ['memory', 'redis'] as const) {
  t.test(`one source holds one certificate fetch at a time, an IPv6 /48 is one source, and callers without an identity are one: none keeps SNS's new certificate out (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const env = await storeEnv(t, store)
    const stalled: Array<{ destroy: () => void }> = []
    let fetches = 0
    await playHost(t, 'sns.eu-west-1.amazonaws.com', (request, response) => {
      const path = request.url ?? ''
      if (!path.endsWith('.pem')) {
        response.writeHead(404).end()
        return
      }
      fetches++
      if (path === PEM) response.writeHead(200).end(CERT)
      else stalled.push(response)
    })
    const origin = 'https://sns.eu-west-1.amazonaws.com'
    const { path, keys } = writeTenants(t)
    const base = { TENANTS_FILE: path, ...env, SES_FEEDBACK_TOPIC_ARNS: TOPIC, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: GATEWAY }
    let made = 0
    const madeUp = (): Sns => sign(notification(origin, {}, { SigningCertURL: `${origin}/SimpleNotificationService-aa${(made++).toString(16)}.pem` }))
    /** Posts every body at once; the answers that came within 3 s (15 of them, and a fetch, end the wait), and the fetches started. */
    const flood = async (app: FastifyInstance, from: (index: number) => Record<string, string>): Promise<{ answers: number[], fetched: number }> => {
      const before = fetches
      const answers: number[] = []
      const pending = Array.from({ length: 16 }, async (_, index) => {
        const answer = await app.inject({ method: 'POST', url: '/feedback/ses', remoteAddress: SIDECAR, headers: { 'content-type': 'text/plain', ...from(index) }, payload: JSON.stringify(madeUp()) })
        answers.push(answer.statusCode)
      })
      t.teardown(async () => { await Promise.all(pending) })
      const deadline = Date.now() + 3000
      const waiting = (): boolean => (answers.length < 15 || fetches === before) && Date.now() < deadline
      while (waiting()) await new Promise((resolve) => setTimeout(resolve, 20))
      return { answers, fetched: fetches - before }
    }
    const genuine = async (app: FastifyInstance, client: string, email: string) => {
      const requestId = (await app.inject({ method: 'POST', url: '/otp/request', remoteAddress: SIDECAR, headers: { ...bearer(keys.acmeLive), ...viaGateway('198.51.100.7') }, payload: { email } })).json().data.requestId as string
      const answer = await app.inject({ method: 'POST', url: '/feedback/ses', remoteAddress: SIDECAR, headers: { 'content-type': 'text/plain', ...viaGateway(client) }, payload: JSON.stringify(sign(notification(origin, permanentBounce(requestId, email)))) })
      return [answer.statusCode, answer.json().message ?? answer.json().code]
    }

    // (a) A stranger through the sidecar without an identity, 16 loops.
    const { app: unmeshed } = await buildApp(t, base)
    const a = await flood(unmeshed, () => ({}))
    t.equal(a.fetched, 1, 'one fetch in flight for every caller without an identity')
    t.same(a.answers, Array.from({ length: 15 }, () => 503), 'the others are answered 503 at once, never 429 (they spend no tokens)')
    t.same(await genuine(unmeshed, '203.0.113.9', 'kim@example.com'), [200, 'handled'], 'SNS through the gateway: its new certificate is fetched and the bounce handled')

    // (b) Through the gateway, 16 /64s of one /48.
    const { app: gatewayed } = await buildApp(t, base)
    const b = await flood(gatewayed, (index) => viaGateway(`2001:db8:1:${index.toString(16)}::1`))
    t.equal(b.fetched, 1, 'one fetch in flight for a whole /48')
    t.same(b.answers, Array.from({ length: 15 }, () => 503), 'the other /64s are answered 503, and spend nothing')
    t.same(await genuine(gatewayed, '203.0.113.9', 'lu@example.com'), [200, 'handled'], 'SNS\'s new certificate is fetched')
    for (const response of stalled) response.destroy()
  })
}
