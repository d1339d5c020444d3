import { get as httpsGet } from 'node:https'
import MessageValidator from 'sns-validator'
import { LruMap } from 'toad-cache'
import type { FeedbackDedupe } from '../state/feedback-dedupe.js'
import type { KeyMode } from '../keys/api-keys.js'
import type { Tenant } from '../tenants/tenant.js'

/** SNS retries a delivery for up to an hour: an older message is a replay. */
export const MAX_MESSAGE_AGE_MS = 60 * 60 * 1000
/** A timestamp this far ahead of the clock is not SNS's. */
const MAX_CLOCK_SKEW_MS = 5 * 60 * 1000
/** How long a handled MessageId is remembered: past the age limit a replay is refused anyway. */
export const DEDUPE_TTL_MS = MAX_MESSAGE_AGE_MS + MAX_CLOCK_SKEW_MS
/** Bound on fetching a signing certificate (once per URL, then cached) and on confirming a subscription. */
const FETCH_TIMEOUT_MS = 5000

const MESSAGE_ID = /^[A-Za-z0-9-]{1,100}$/
/**
 * Certificate URLs fetched for the first time, per minute and process. SNS signs with a few
 * certificates, each fetched once; a stranger who knows a listed topic could otherwise make
 * the service fetch a made-up `.pem` from SNS's hosts with every request.
 */
const NEW_CERT_URLS_PER_MINUTE = 10
/** A certificate URL whose fetch failed is not fetched again for this long. */
const FAILED_CERT_URL_MS = 60_000
/** Certificate URLs remembered as fetched, or as failing. */
const CERT_URLS_REMEMBERED = 1000

/** Why a message was refused, as the stable error code of the answer. */
export type FeedbackRefusal =
  | 'SNS_MESSAGE_INVALID'
  | 'SNS_TOPIC_NOT_ALLOWED'
  | 'SNS_MESSAGE_STALE'
  | 'SNS_CERT_URL_NOT_ALLOWED'
  | 'SNS_SIGNATURE_INVALID'

export class FeedbackRefused extends Error {
  readonly code: FeedbackRefusal
  constructor (code: FeedbackRefusal, message: string) {
    super(message)
    this.name = 'FeedbackRefused'
    this.code = code
  }
}

/** The signing certificate could not be fetched, or the subscription not confirmed: SNS should retry. */
export class FeedbackUnavailable extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'FeedbackUnavailable'
  }
}

export type FeedbackEventType = 'delivered' | 'delayed' | 'bounced' | 'complained'

/** One recipient's outcome of a message the service sent, as the tags map it. */
export interface DeliveryFeedback {
  tenant: Tenant
  mode: KeyMode
  requestId: string
  address: string
  type: FeedbackEventType
  /** For `bounced`. */
  bounceType?: 'permanent' | 'transient'
  /** A permanent bounce or a complaint: the mailbox is to be suppressed. */
  suppress: boolean
}

export type FeedbackOutcome = 'confirmed' | 'handled' | 'duplicate' | 'ignored'

export interface SesFeedbackOptions {
  topicArns: ReadonlySet<string>
  certUrlPattern: RegExp
  dedupe: FeedbackDedupe
  tenant: (id: string) => Tenant | undefined
  /** Acts on one recipient's outcome (webhook, suppression). */
  apply: (feedback: DeliveryFeedback) => Promise<void>
  now?: () => number
  /** Confirms a subscription: a GET of its SubscribeURL. */
  confirm?: (url: string) => Promise<void>
}

interface SnsMessage {
  Type: string
  MessageId: string
  TopicArn: string
  Timestamp: string
  SigningCertURL: string
  Message: string
  SubscribeURL?: string
}

function field (body: Record<string, unknown>, name: string): string {
  const value = body[name]
  if (typeof value !== 'string' || value === '') throw new FeedbackRefused('SNS_MESSAGE_INVALID', `the message has no ${name}`)
  return value
}

/** The parts of an SNS message the handler reads; anything else is refused as invalid. */
function snsMessage (body: unknown): SnsMessage {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new FeedbackRefused('SNS_MESSAGE_INVALID', 'the body is not an SNS message')
  const record = body as Record<string, unknown>
  const message: SnsMessage = {
    Type: field(record, 'Type'),
    MessageId: field(record, 'MessageId'),
    TopicArn: field(record, 'TopicArn'),
    Timestamp: field(record, 'Timestamp'),
    SigningCertURL: field(record, 'SigningCertURL'),
    Message: field(record, 'Message')
  }
  field(record, 'Signature')
  field(record, 'SignatureVersion')
  if (!['Notification', 'SubscriptionConfirmation', 'UnsubscribeConfirmation'].includes(message.Type)) throw new FeedbackRefused('SNS_MESSAGE_INVALID', 'unknown message Type')
  if (!MESSAGE_ID.test(message.MessageId)) throw new FeedbackRefused('SNS_MESSAGE_INVALID', 'malformed MessageId')
  if (message.Type !== 'Notification') message.SubscribeURL = field(record, 'SubscribeURL')
  return message
}

/** A GET of the SubscribeURL over node:https, the same client (and trust store) that fetches certificates. */
async function defaultConfirm (url: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const request = httpsGet(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) }, (response) => {
      response.resume()
      if (response.statusCode === 200) resolve()
      else reject(new Error(`HTTP ${response.statusCode ?? 0}`))
    })
    request.on('error', reject)
  })
}

/** The first value of an SES message tag (SES sends each tag as a list). */
function tag (tags: unknown, name: string): string | null {
  if (typeof tags !== 'object' || tags === null) return null
  const values = (tags as Record<string, unknown>)[name]
  const first: unknown = Array.isArray(values) ? values[0] : undefined
  return typeof first === 'string' && first !== '' ? first : null
}

function addresses (list: unknown, key?: string): string[] {
  if (!Array.isArray(list)) return []
  const found: string[] = []
  for (const entry of list) {
    const value: unknown = key === undefined ? entry : (typeof entry === 'object' && entry !== null ? (entry as Record<string, unknown>)[key] : undefined)
    if (typeof value === 'string') found.push(value)
  }
  return found
}

/** Reads an SES event (event publishing's `eventType`): which outcome, for which recipients. */
function sesOutcome (event: Record<string, unknown>): Array<{ address: string, type: FeedbackEventType, bounceType?: 'permanent' | 'transient', suppress: boolean }> {
  const part = (name: string): Record<string, unknown> => {
    const value = event[name]
    return typeof value === 'object' && value !== null ? value as Record<string, unknown> : {}
  }
  switch (event.eventType) {
    case 'Delivery':
      return addresses(part('delivery').recipients).map((address) => ({ address, type: 'delivered', suppress: false }))
    case 'DeliveryDelay':
      return addresses(part('deliveryDelay').delayedRecipients, 'emailAddress').map((address) => ({ address, type: 'delayed', suppress: false }))
    case 'Bounce': {
      const bounce = part('bounce')
      const permanent = bounce.bounceType === 'Permanent'
      return addresses(bounce.bouncedRecipients, 'emailAddress').map((address) => ({ address, type: 'bounced', bounceType: permanent ? 'permanent' : 'transient', suppress: permanent }))
    }
    case 'Complaint':
      return addresses(part('complaint').complainedRecipients, 'emailAddress').map((address) => ({ address, type: 'complained', suppress: true }))
    default:
      return []
  }
}

/**
 * The HTTPS subscription of the SNS topic SES publishes a configuration set's events to.
 * Every message is checked before anything else happens: its topic is one of
 * SES_FEEDBACK_TOPIC_ARNS, it is no older than SNS's retry window, its signing certificate
 * comes from a URL matching SNS_SIGNING_CERT_URL_PATTERN, and its signature (version 1 or 2)
 * verifies with that certificate (sns-validator; certificates cached per URL). Then each
 * MessageId has one effect. An event is mapped to its tenant and dispatch by the tags the
 * service set on the message, never by the address alone.
 */
export class SesFeedback {
  readonly #options: SesFeedbackOptions
  readonly #validator: MessageValidator
  readonly #now: () => number
  readonly #confirm: (url: string) => Promise<void>
  /** URLs whose certificate was fetched (the validator keeps the certificate). */
  readonly #fetchedCertUrls = new LruMap<true>(CERT_URLS_REMEMBERED)
  /** URLs whose fetch failed, until when they are not tried again. */
  readonly #failedCertUrls = new LruMap<number>(CERT_URLS_REMEMBERED)
  #newCertUrlWindow = { startedAt: 0, fetches: 0 }

  constructor (options: SesFeedbackOptions) {
    this.#options = options
    // Our own pattern checks the whole URL first; the validator still insists on https and .pem.
    this.#validator = new MessageValidator(/^[^/?#@]+$/)
    this.#now = options.now ?? Date.now
    this.#confirm = options.confirm ?? defaultConfirm
  }

  async receive (body: unknown): Promise<FeedbackOutcome> {
    const message = snsMessage(body)
    if (!this.#options.topicArns.has(message.TopicArn)) throw new FeedbackRefused('SNS_TOPIC_NOT_ALLOWED', 'the topic is not one of SES_FEEDBACK_TOPIC_ARNS')
    const sentAt = Date.parse(message.Timestamp)
    const now = this.#now()
    if (Number.isNaN(sentAt)) throw new FeedbackRefused('SNS_MESSAGE_INVALID', 'malformed Timestamp')
    if (sentAt < now - MAX_MESSAGE_AGE_MS || sentAt > now + MAX_CLOCK_SKEW_MS) throw new FeedbackRefused('SNS_MESSAGE_STALE', 'the message is older than an hour (or from the future)')
    if (!this.#options.certUrlPattern.test(message.SigningCertURL)) throw new FeedbackRefused('SNS_CERT_URL_NOT_ALLOWED', 'the signing certificate URL does not match SNS_SIGNING_CERT_URL_PATTERN')
    this.#admitCertFetch(message.SigningCertURL)
    await this.#verify(body as Record<string, unknown>, message.SigningCertURL)

    if (!await this.#options.dedupe.claim(message.MessageId)) return 'duplicate'
    try {
      return await this.#act(message)
    } catch (error) {
      await this.#options.dedupe.release(message.MessageId)
      throw error
    }
  }

  /** Refuses (as unavailable: SNS retries) a certificate fetch past the bounds above. */
  #admitCertFetch (url: string): void {
    if (this.#fetchedCertUrls.get(url) === true) return
    const now = this.#now()
    const failedUntil = this.#failedCertUrls.get(url)
    if (failedUntil !== undefined && failedUntil > now) throw new FeedbackUnavailable('the signing certificate could not be fetched a moment ago')
    if (now - this.#newCertUrlWindow.startedAt >= 60_000) this.#newCertUrlWindow = { startedAt: now, fetches: 0 }
    if (this.#newCertUrlWindow.fetches >= NEW_CERT_URLS_PER_MINUTE) throw new FeedbackUnavailable('too many new signing certificate URLs this minute')
    this.#newCertUrlWindow.fetches++
  }

  async #verify (body: Record<string, unknown>, certUrl: string): Promise<void> {
    let timer: NodeJS.Timeout | undefined
    const verdict = new Promise<'valid' | 'invalid' | 'fetch'>((resolve) => {
      timer = setTimeout(() => { resolve('fetch') }, FETCH_TIMEOUT_MS)
      this.#validator.validate(body, (error) => {
        if (error === null) resolve('valid')
        // The certificate's host did not answer as expected: ours to retry, not the sender's fault.
        else resolve(/certificate could not be retrieved|ECONN|ENOTFOUND|EAI_AGAIN|socket/i.test(`${error.message} ${(error as { code?: string }).code ?? ''}`) ? 'fetch' : 'invalid')
      })
    })
    const result = await verdict
    clearTimeout(timer)
    if (result === 'fetch') {
      this.#failedCertUrls.set(certUrl, this.#now() + FAILED_CERT_URL_MS)
      throw new FeedbackUnavailable('the signing certificate could not be fetched')
    }
    this.#fetchedCertUrls.set(certUrl, true)
    if (result === 'invalid') throw new FeedbackRefused('SNS_SIGNATURE_INVALID', 'the signature does not verify')
  }

  async #act (message: SnsMessage): Promise<FeedbackOutcome> {
    if (message.Type === 'SubscriptionConfirmation') {
      const subscribe = message.SubscribeURL ?? ''
      // Signed by SNS, and still only followed to the certificate's own origin: never a
      // request to wherever a message says.
      if (!sameOrigin(subscribe, message.SigningCertURL)) throw new FeedbackRefused('SNS_MESSAGE_INVALID', 'SubscribeURL is not on the SNS host')
      try {
        await this.#confirm(subscribe)
      } catch {
        throw new FeedbackUnavailable('the subscription could not be confirmed')
      }
      return 'confirmed'
    }
    if (message.Type !== 'Notification') return 'ignored'
    let event: unknown
    try {
      event = JSON.parse(message.Message)
    } catch {
      return 'ignored'
    }
    if (typeof event !== 'object' || event === null) return 'ignored'
    const mail = (event as Record<string, unknown>).mail
    const tags = typeof mail === 'object' && mail !== null ? (mail as Record<string, unknown>).tags : undefined
    const tenantId = tag(tags, 'tenant')
    const mode = tag(tags, 'mode')
    const requestId = tag(tags, 'requestId')
    const tenant = tenantId === null ? undefined : this.#options.tenant(tenantId)
    if (tenant === undefined || (mode !== 'live' && mode !== 'test') || requestId === null) return 'ignored'
    // Only the message's own recipients: a bounce names no one the message was not sent to.
    const destination = new Set(addresses(typeof mail === 'object' && mail !== null ? (mail as Record<string, unknown>).destination : undefined).map((address) => address.toLowerCase()))
    const outcomes = sesOutcome(event as Record<string, unknown>).filter((outcome) => destination.has(outcome.address.toLowerCase()))
    if (outcomes.length === 0) return 'ignored'
    for (const outcome of outcomes) {
      await this.#options.apply({ tenant, mode, requestId, ...outcome })
    }
    return 'handled'
  }
}

function sameOrigin (a: string, b: string): boolean {
  try {
    const first = new URL(a)
    return first.protocol === 'https:' && first.origin === new URL(b).origin
  } catch {
    return false
  }
}
