import { verify, type KeyObject } from 'node:crypto'
import { FeedbackRefused } from './refusals.js'

export type SnsMessageType = 'Notification' | 'SubscriptionConfirmation' | 'UnsubscribeConfirmation'

/**
 * The fields SNS signs, per message type, in the order of the string to sign (AWS's
 * "Verifying the signatures of Amazon SNS messages"). Subject is signed when SNS sends it.
 */
const SIGNED_FIELDS: Record<SnsMessageType, readonly string[]> = {
  Notification: ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type'],
  SubscriptionConfirmation: ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'],
  UnsubscribeConfirmation: ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type']
}
const OPTIONAL_FIELDS: ReadonlySet<string> = new Set(['Subject'])
/** What SNS sends beside the signed fields: the signature, and the certificate to check it with. */
const SIGNATURE_FIELDS = ['Signature', 'SignatureVersion', 'SigningCertURL'] as const
const EVERY_SIGNED_FIELD: ReadonlySet<string> = new Set(Object.values(SIGNED_FIELDS).flat())

/** A field name with case and punctuation folded away: two names that fold alike are two spellings of one field. */
function folded (name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]/g, '')
}

/**
 * Every field of an SNS HTTP/S message, by its folded name. UnsubscribeURL and
 * MessageAttributes are sent unsigned and never read, but a second spelling of them is as
 * suspect as one of a signed field: it is what a library that renames fields acts on.
 */
const SNS_SPELLINGS: ReadonlyMap<string, string> = new Map(
  [...EVERY_SIGNED_FIELD, ...SIGNATURE_FIELDS, 'UnsubscribeURL', 'MessageAttributes'].map((name) => [folded(name), name])
)

const MESSAGE_ID = /^[A-Za-z0-9-]{1,100}$/

/**
 * An SNS message reduced to what the service trusts: the fields SNS signs for its type, as
 * strings, and the signature with its certificate URL. Nothing else of the body is kept, so
 * nothing else can be read, checked or verified by mistake.
 */
export interface SnsMessage {
  type: SnsMessageType
  messageId: string
  topicArn: string
  timestamp: string
  message: string
  /** For subscription messages. */
  subscribeUrl?: string
  /** The signed fields, name and value, in signing order. */
  signed: ReadonlyArray<readonly [string, string]>
  signature: string
  signatureVersion: '1' | '2'
  signingCertUrl: string
}

function invalid (reason: string): FeedbackRefused {
  return new FeedbackRefused('SNS_MESSAGE_INVALID', reason)
}

function stringField (body: Record<string, unknown>, name: string): string {
  const value = body[name]
  if (typeof value !== 'string' || value === '') throw invalid(`${name} is not a non-empty string`)
  return value
}

function isMessageType (type: string): type is SnsMessageType {
  return Object.hasOwn(SIGNED_FIELDS, type)
}

/**
 * Builds the canonical message from a parsed body. Refused (400 SNS_MESSAGE_INVALID): a body
 * that is not an object; any field named like an SNS field but spelled otherwise
 * (`SigningCertUrl`, `subject`…); a signed field of another message type (a Notification
 * carrying `SubscribeURL` or `Token`); a field the type needs that is missing, or not a
 * non-empty string (`Subject: null` included). Other fields are neither read nor signed.
 */
export function snsMessage (body: unknown): SnsMessage {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalid('the body is not an SNS message')
  const record = body as Record<string, unknown>
  for (const key of Object.keys(record)) {
    const field = SNS_SPELLINGS.get(folded(key))
    if (field !== undefined && field !== key) throw invalid(`${JSON.stringify(key)} is another spelling of ${field}`)
  }
  const type = stringField(record, 'Type')
  if (!isMessageType(type)) throw invalid('unknown message Type')
  const fields = SIGNED_FIELDS[type]
  for (const name of EVERY_SIGNED_FIELD) {
    if (!fields.includes(name) && Object.hasOwn(record, name)) throw invalid(`a ${type} has no ${name}`)
  }
  const signed: Array<readonly [string, string]> = []
  for (const name of fields) {
    if (OPTIONAL_FIELDS.has(name) && !Object.hasOwn(record, name)) continue
    signed.push([name, stringField(record, name)])
  }
  const value = (name: string): string => signed.find(([field]) => field === name)?.[1] ?? ''
  const signatureVersion = stringField(record, 'SignatureVersion')
  if (signatureVersion !== '1' && signatureVersion !== '2') throw invalid('SignatureVersion is neither 1 nor 2')
  const message: SnsMessage = {
    type,
    messageId: value('MessageId'),
    topicArn: value('TopicArn'),
    timestamp: value('Timestamp'),
    message: value('Message'),
    signed,
    signature: stringField(record, 'Signature'),
    signatureVersion,
    signingCertUrl: stringField(record, 'SigningCertURL')
  }
  if (!MESSAGE_ID.test(message.messageId)) throw invalid('malformed MessageId')
  if (type !== 'Notification') message.subscribeUrl = value('SubscribeURL')
  return message
}

/** AWS's string to sign: each signed field as `name\nvalue\n`, in order. */
function stringToSign (message: SnsMessage): string {
  return message.signed.map(([name, value]) => `${name}\n${value}\n`).join('')
}

/** RSA PKCS #1 v1.5 with SHA1 (SignatureVersion 1) or SHA256 (2), over the canonical fields only. */
export function signatureVerifies (message: SnsMessage, publicKey: KeyObject): boolean {
  try {
    return verify(message.signatureVersion === '1' ? 'sha1' : 'sha256', Buffer.from(stringToSign(message), 'utf8'), publicKey, Buffer.from(message.signature, 'base64'))
  } catch {
    return false
  }
}

/** SNS's certificate URLs are under 100 characters; a longer one is refused before any parse or match. */
export const MAX_CERT_URL_LENGTH = 256

/** A signing certificate URL as checked: the host and path that are fetched, and nothing else. */
export interface CertificateUrl {
  /** The URL's one serialisation, as matched against the pattern. */
  href: string
  /** A DNS name: no IP literal, no trailing dot, no percent-encoding. */
  hostname: string
  pathname: string
  origin: string
}

const IP_LITERAL = /^(\[.*\]|[0-9.]+)$/

/**
 * The signing certificate URL, parsed once (WHATWG `URL`, as node:https reads it): the host and
 * path this returns are what is checked and what is fetched, on port 443. Refused (403
 * SNS_CERT_URL_NOT_ALLOWED) unless, whatever SNS_SIGNING_CERT_URL_PATTERN says: at most
 * MAX_CERT_URL_LENGTH characters; https; the raw text is its one serialisation (no backslash,
 * upper case, percent-encoding in the host, `:443`, dot segment or whitespace for two parsers
 * to read apart); no credentials, port, query or fragment; a host that is a DNS name (no IP
 * literal, no trailing dot); a path ending `.pem`; and the whole serialisation matches `pattern`,
 * which must end the host where the URL's ends (it does not match the same URL on a longer host).
 */
export function signingCertificateUrl (raw: string, pattern: RegExp): CertificateUrl {
  const refused = (): FeedbackRefused => new FeedbackRefused('SNS_CERT_URL_NOT_ALLOWED', 'the signing certificate URL is not an allowed SNS certificate URL')
  if (raw.length > MAX_CERT_URL_LENGTH) throw refused()
  const url = URL.parse(raw)
  if (url === null || url.protocol !== 'https:' || url.username !== '' || url.password !== '' || url.port !== '' || url.search !== '' || url.hash !== '') throw refused()
  if (raw !== url.href || url.href !== `${url.origin}${url.pathname}`) throw refused()
  if (url.hostname.endsWith('.') || IP_LITERAL.test(url.hostname) || !url.pathname.endsWith('.pem')) throw refused()
  if (!pattern.test(url.href)) throw refused()
  // A pattern that names the host only as a prefix (`https://sns\.example.*\.pem`) matches the
  // attacker's `sns.example.evil.example` too: the host that matched must be the whole host.
  if (pattern.test(`https://${url.hostname}.invalid${url.pathname}`)) throw refused()
  return { href: url.href, hostname: url.hostname, pathname: url.pathname, origin: url.origin }
}

/**
 * A subscription's SubscribeURL, parsed once: https, no credentials, and on the origin of the
 * certificate that signed the message, so the service never requests wherever a message says.
 */
export function subscribeUrl (raw: string, certificateUrl: CertificateUrl): URL {
  const url = URL.parse(raw)
  if (url === null || url.protocol !== 'https:' || url.username !== '' || url.password !== '' || url.origin !== certificateUrl.origin) throw invalid('SubscribeURL is not on the SNS host')
  return url
}
