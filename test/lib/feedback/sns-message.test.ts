import { createSign, generateKeyPairSync } from 'node:crypto'
import t from 'tap'
import { parseConfig } from '../../../lib/config/from-env.js'
import { FeedbackRefused } from '../../../lib/feedback/refusals.js'
import { signatureVerifies, signingCertificateUrl, snsMessage, subscribeUrl } from '../../../lib/feedback/sns-message.js'

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
const DEFAULT = parseConfig({}).sesFeedback.certUrlPattern

function notification (overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    Type: 'Notification',
    MessageId: 'b1f2c3d4-0000-4000-8000-000000000001',
    TopicArn: 'arn:aws:sns:us-east-1:123456789012:ses-events',
    Message: '{"eventType":"Delivery"}',
    Timestamp: '2026-11-28T07:00:00.000Z',
    SignatureVersion: '2',
    Signature: 'AAAA',
    SigningCertURL: 'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    UnsubscribeURL: 'https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=x',
    ...overrides
  }
}

function refusal (run: () => unknown): string {
  try {
    run()
  } catch (error) {
    if (error instanceof FeedbackRefused) return error.code
    throw error
  }
  return 'accepted'
}

t.test('the canonical message holds exactly the fields SNS signs for its type, in signing order', async (t) => {
  const plain = snsMessage(notification())
  t.same(plain.signed.map(([name]) => name), ['Message', 'MessageId', 'Timestamp', 'TopicArn', 'Type'], 'no Subject when SNS sent none; UnsubscribeURL is not signed')
  t.same(snsMessage(notification({ Subject: 'Hi' })).signed.map(([name]) => name), ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type'])
  const confirmation = snsMessage(notification({ Type: 'SubscriptionConfirmation', SubscribeURL: 'https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription', Token: 'tok', UnsubscribeURL: undefined }))
  t.same(confirmation.signed.map(([name]) => name), ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'])
  t.equal(confirmation.subscribeUrl, 'https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription')
  t.equal(snsMessage(notification({ Extra: { any: 'thing' }, MessageAttributes: { a: 1 } })).signed.length, 5, 'fields SNS does not sign are neither kept nor refused')
})

t.test('a field under a second spelling, a signed field of another type, a value that is not a non-empty string: 400', async (t) => {
  const cases: Array<[string, Record<string, unknown>]> = [
    ['SigningCertUrl', { SigningCertUrl: 'https://evil.example/x.pem' }],
    ['SigningCertUrl alone', { SigningCertURL: undefined, SigningCertUrl: 'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem' }],
    ['UnsubscribeUrl', { UnsubscribeUrl: 'https://evil.example/' }],
    ['SubscribeUrl', { SubscribeUrl: 'https://evil.example/' }],
    ['subject', { subject: 'x' }],
    ['Signing-Cert-URL', { 'Signing-Cert-URL': 'https://evil.example/x.pem' }],
    ['signing cert url', { 'signing cert url': 'https://evil.example/x.pem' }],
    ['Message_Attributes', { Message_Attributes: {} }],
    ['Subject: null', { Subject: null }],
    ['Subject: 42', { Subject: 42 }],
    ['Subject: ""', { Subject: '' }],
    ['Message: an object', { Message: { eventType: 'Bounce' } }],
    ['MessageId: a number', { MessageId: 42 }],
    ['Signature: an array', { Signature: ['AAAA'] }],
    ['SignatureVersion: 2 as a number', { SignatureVersion: 2 }],
    ['SignatureVersion 3', { SignatureVersion: '3' }],
    ['SubscribeURL in a Notification', { SubscribeURL: 'https://sns.us-east-1.amazonaws.com/' }],
    ['Token in a Notification', { Token: 'tok' }],
    ['Subject in a confirmation', { Type: 'UnsubscribeConfirmation', SubscribeURL: 'https://sns.us-east-1.amazonaws.com/', Token: 'tok', Subject: 'x' }],
    ['Token: a number in a confirmation', { Type: 'SubscriptionConfirmation', SubscribeURL: 'https://sns.us-east-1.amazonaws.com/', Token: 7 }],
    ['a confirmation without Token', { Type: 'SubscriptionConfirmation', SubscribeURL: 'https://sns.us-east-1.amazonaws.com/' }],
    ['an unknown Type', { Type: 'Notice' }],
    ['Type: an inherited name', { Type: 'toString' }],
    ['a MessageId with a newline', { MessageId: 'a\nb' }]
  ]
  for (const [what, overrides] of cases) t.equal(refusal(() => snsMessage(notification(overrides))), 'SNS_MESSAGE_INVALID', what)
  for (const body of [null, [], 'text', 42]) t.equal(refusal(() => snsMessage(body)), 'SNS_MESSAGE_INVALID', JSON.stringify(body))
})

t.test('the signature is checked over the canonical fields, SHA1 for version 1 and SHA256 for version 2', async (t) => {
  const signed = (version: '1' | '2', fields: Array<[string, string]>): string => {
    const signer = createSign(version === '1' ? 'RSA-SHA1' : 'RSA-SHA256')
    for (const [name, value] of fields) signer.update(`${name}\n${value}\n`)
    return signer.sign(privateKey, 'base64')
  }
  for (const version of ['1', '2'] as const) {
    const body = notification({ Subject: 'Hi', SignatureVersion: version })
    const fields = ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type'].map((name): [string, string] => [name, String(body[name])])
    t.ok(signatureVerifies(snsMessage({ ...body, Signature: signed(version, fields) }), publicKey), `version ${version}`)
    t.notOk(signatureVerifies(snsMessage({ ...body, Signature: signed(version === '1' ? '2' : '1', fields) }), publicKey), `version ${version} with the other hash`)
    t.notOk(signatureVerifies(snsMessage({ ...body, Subject: 'Ho', Signature: signed(version, fields) }), publicKey), 'a changed field')
    t.notOk(signatureVerifies(snsMessage({ ...body, Signature: 'not base64 at all!' }), publicKey), 'a malformed signature')
  }
})

t.test('the certificate URL is parsed once, in its one serialisation, and the pattern matches it whole', async (t) => {
  const allowed = signingCertificateUrl('https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem', DEFAULT)
  t.same(allowed, { href: 'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem', hostname: 'sns.us-east-1.amazonaws.com', pathname: '/SimpleNotificationService-0123abcd.pem', origin: 'https://sns.us-east-1.amazonaws.com' }, 'the host and path that will be fetched')
  for (const url of [
    'https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.cn-northwest-1.amazonaws.com.cn/SimpleNotificationService-0123abcd.pem',
    'https://sns.ap-southeast-3.amazonaws.com/SimpleNotificationService-0123abcd.pem'
  ]) t.equal(signingCertificateUrl(url, DEFAULT).href, url, url)
  const refused = [
    'https://sns.us-east-1.amazonaws.com\\@evil.example/x.pem',
    'https://evil.example#@sns.us-east-1.amazonaws.com/x.pem',
    'https://sns.us-east-1.amazonaws.com@evil.example/SimpleNotificationService-0123abcd.pem',
    'https://user:pass@sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-1.amazonaws.com:443/SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-1.amazonaws.com:8443/SimpleNotificationService-0123abcd.pem',
    'HTTPS://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://SNS.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-1.amazonaws.com./SimpleNotificationService-0123abcd.pem',
    ' https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem?',
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem#',
    'https://sns.us-east-1.amazonaws.com/x/../SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd%2Epem',
    'https://sns.us-east-1.amazonaws.com\t/SimpleNotificationService-0123abcd.pem',
    'http://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.s3.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.s3-us-west-2.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-1.amazonaws.com.evil.example/SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem/',
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123ABCD.pem',
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcg.pem',
    'https://sns.us-east-1.amazonaws.com/x/SimpleNotificationService-0123abcd.pem',
    'https://sns.useast-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.usa-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-12.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns%2eus-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem',
    'https://sns.us-east-1.amazonaws%2ecom/SimpleNotificationService-0123abcd.pem',
    `https://sns.us-east-1.amazonaws.com/SimpleNotificationService-${'0'.repeat(200)}.pem`,
    'not a URL'
  ]
  for (const url of refused) t.equal(refusal(() => signingCertificateUrl(url, DEFAULT)), 'SNS_CERT_URL_NOT_ALLOWED', JSON.stringify(url))
  // The operator's pattern decides the host, never the rules above: this one names every host
  // below whole, with any port and path.
  const anything = parseConfig({ SNS_SIGNING_CERT_URL_PATTERN: 'https://(certs\\.internal\\.example\\.?|evil\\.example|127\\.0\\.0\\.1|\\[::1\\])(:[0-9]+)?/.*' }).sesFeedback.certUrlPattern
  t.equal(signingCertificateUrl('https://certs.internal.example/a.pem', anything).hostname, 'certs.internal.example', 'a host the pattern allows')
  for (const loose of ['.*', 'https://certs\\.internal\\.example.*', 'https://[^/]*/a\\.pem']) {
    const pattern = parseConfig({ SNS_SIGNING_CERT_URL_PATTERN: loose }).sesFeedback.certUrlPattern
    t.equal(refusal(() => signingCertificateUrl('https://certs.internal.example/a.pem', pattern)), 'SNS_CERT_URL_NOT_ALLOWED', `${loose}: a pattern that does not end the host refuses every URL`)
    t.equal(refusal(() => signingCertificateUrl('https://certs.internal.example.evil.example/a.pem', pattern)), 'SNS_CERT_URL_NOT_ALLOWED', `${loose}: and so the attacker's host it would admit`)
  }
  for (const url of [
    'https://a@certs.internal.example/a.pem',
    'https://certs.internal.example@evil.example/a.pem',
    'https://certs.internal.example\\@evil.example/a.pem',
    'https://certs.internal.example\\a.pem',
    'http://certs.internal.example/a.pem',
    'https://certs.internal.example:8443/a.pem',
    'https://certs.internal.example:443/a.pem',
    'https://certs.internal.example/a.pem?b',
    'https://certs.internal.example/a.pem#b',
    'https://certs.internal.example/a.txt',
    'https://Certs.Internal.Example/a.pem',
    'https://certs.internal.example./a.pem',
    'https://certs%2einternal.example/a.pem',
    'https://certs.internal.example/%2e%2e/a.pem',
    'https://127.0.0.1/a.pem',
    'https://2130706433/a.pem',
    'https://0x7f.1/a.pem',
    'https://[::1]/a.pem',
    'https://[::ffff:127.0.0.1]/a.pem',
    `https://certs.internal.example/${'a'.repeat(240)}.pem`
  ]) {
    t.equal(refusal(() => signingCertificateUrl(url, anything)), 'SNS_CERT_URL_NOT_ALLOWED', `${url} whatever the pattern`)
  }
  const unanchored = parseConfig({ SNS_SIGNING_CERT_URL_PATTERN: 'https://certs\\.internal\\.example/[a-z]+\\.pem' }).sesFeedback.certUrlPattern
  t.equal(signingCertificateUrl('https://certs.internal.example/a.pem', unanchored).hostname, 'certs.internal.example')
  t.equal(refusal(() => signingCertificateUrl('https://evil.example/https://certs.internal.example/a.pem', unanchored)), 'SNS_CERT_URL_NOT_ALLOWED', 'a pattern without anchors still matches the whole URL')
})

t.test('SubscribeURL: https on the origin of the certificate that signed the message', async (t) => {
  const certificate = new URL('https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123abcd.pem')
  t.equal(subscribeUrl('https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=t', certificate).searchParams.get('Token'), 't')
  for (const url of ['https://evil.example/?Action=ConfirmSubscription', 'https://x@sns.us-east-1.amazonaws.com/', 'http://sns.us-east-1.amazonaws.com/', 'https://sns.us-east-1.amazonaws.com:8443/', 'nope']) {
    t.equal(refusal(() => subscribeUrl(url, certificate)), 'SNS_MESSAGE_INVALID', url)
  }
})
