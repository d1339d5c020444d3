import { get as httpsGet } from 'node:https'
import type { FeedbackDedupe } from '../state/feedback-dedupe.js'
import { isKeyMode, type KeyMode } from '../keys/api-keys.js'
import type { Tenant } from '../tenants/tenant.js'
import { FeedbackRefused, FeedbackUnavailable } from './refusals.js'
import { SigningCertificates, type CertificateRequester } from './sns-certificates.js'
import { signatureVerifies, signingCertificateUrl, snsMessage, subscribeUrl, type CertificateUrl, type SnsMessage } from './sns-message.js'

/** SNS retries a delivery for up to an hour: an older message is a replay. */
export const MAX_MESSAGE_AGE_MS = 60 * 60 * 1000
/** A timestamp this far ahead of the clock is not SNS's. */
const MAX_CLOCK_SKEW_MS = 5 * 60 * 1000
/** How long a handled MessageId is remembered: past the age limit a replay is refused anyway. */
export const DEDUPE_TTL_MS = MAX_MESSAGE_AGE_MS + MAX_CLOCK_SKEW_MS
/** Bound on confirming a subscription. */
const CONFIRM_TIMEOUT_MS = 5000

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
  confirm?: (url: URL) => Promise<void>
  /** Told once per failed certificate fetch (SigningCertificatesOptions.fetchFailed). */
  certificateFailed?: (url: string, reason: string) => void
}

/** A GET of the SubscribeURL over node:https, the same client (and trust store) that fetches certificates. */
async function defaultConfirm (url: URL): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const request = httpsGet(url, { signal: AbortSignal.timeout(CONFIRM_TIMEOUT_MS) }, (response) => {
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

const SNS_HOST = /^sns\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$/
const TOPIC_ARN = /^arn:(aws[a-z-]*):sns:([a-z0-9-]+):/

/**
 * SNS signs a topic's messages with a certificate on its own region's host: a message of a
 * listed topic naming another region's host is not SNS's. Strangers could otherwise name
 * made-up certificates on the slowest of SNS's hosts and hold every fetch in flight with few
 * requests. Hosts of another shape are the operator's (SNS_SIGNING_CERT_URL_PATTERN).
 */
function onTopicsRegion (host: string, topicArn: string): boolean {
  const served = SNS_HOST.exec(host)
  if (served === null) return true
  const topic = TOPIC_ARN.exec(topicArn)
  return topic !== null && topic[2] === served[1] && (topic[1] === 'aws-cn') === (served[2] === '.cn')
}

/**
 * The HTTPS subscription of the SNS topic SES publishes a configuration set's events to.
 * Every message is checked before anything else happens: it is reduced to the fields SNS
 * signs (a field under two spellings is refused), its topic is one of
 * SES_FEEDBACK_TOPIC_ARNS, it is no older than SNS's retry window, its signing certificate
 * URL is SNS's (SNS_SIGNING_CERT_URL_PATTERN, parsed once and fetched as parsed), and its
 * signature (version 1 or 2) verifies over those fields with that certificate. Then each
 * MessageId has one effect. An event is mapped to its tenant and dispatch by the tags the
 * service set on the message, never by the address alone.
 */
export class SesFeedback {
  readonly #options: SesFeedbackOptions
  readonly #certificates: SigningCertificates
  readonly #now: () => number
  readonly #confirm: (url: URL) => Promise<void>

  constructor (options: SesFeedbackOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
    this.#certificates = new SigningCertificates({ now: this.#now, fetchFailed: options.certificateFailed ?? (() => {}) })
    this.#confirm = options.confirm ?? defaultConfirm
  }

  /** `requester`: the sender's source, which new certificate fetches are counted against (see SigningCertificates). */
  async receive (body: unknown, requester: CertificateRequester): Promise<FeedbackOutcome> {
    const message = snsMessage(body)
    if (!this.#options.topicArns.has(message.topicArn)) throw new FeedbackRefused('SNS_TOPIC_NOT_ALLOWED', 'the topic is not one of SES_FEEDBACK_TOPIC_ARNS')
    const sentAt = Date.parse(message.timestamp)
    const now = this.#now()
    if (Number.isNaN(sentAt)) throw new FeedbackRefused('SNS_MESSAGE_INVALID', 'malformed Timestamp')
    if (sentAt < now - MAX_MESSAGE_AGE_MS || sentAt > now + MAX_CLOCK_SKEW_MS) throw new FeedbackRefused('SNS_MESSAGE_STALE', 'the message is older than an hour (or from the future)')
    const certificateUrl = signingCertificateUrl(message.signingCertUrl, this.#options.certUrlPattern)
    if (!onTopicsRegion(certificateUrl.hostname, message.topicArn)) throw new FeedbackRefused('SNS_CERT_URL_NOT_ALLOWED', 'the certificate is not on the SNS host of the topic\'s region')
    if (!signatureVerifies(message, await this.#certificates.publicKey(certificateUrl, requester))) throw new FeedbackRefused('SNS_SIGNATURE_INVALID', 'the signature does not verify')

    if (!await this.#options.dedupe.claim(message.messageId)) return 'duplicate'
    try {
      return await this.#act(message, certificateUrl)
    } catch (error) {
      await this.#options.dedupe.release(message.messageId)
      throw error
    }
  }

  async #act (message: SnsMessage, certificateUrl: CertificateUrl): Promise<FeedbackOutcome> {
    if (message.type === 'SubscriptionConfirmation') {
      const subscribe = subscribeUrl(message.subscribeUrl ?? '', certificateUrl)
      try {
        await this.#confirm(subscribe)
      } catch {
        throw new FeedbackUnavailable('confirmation-failed', 'the subscription could not be confirmed')
      }
      return 'confirmed'
    }
    if (message.type !== 'Notification') return 'ignored'
    let event: unknown
    try {
      event = JSON.parse(message.message)
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
    if (tenant === undefined || !isKeyMode(mode) || requestId === null) return 'ignored'
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
