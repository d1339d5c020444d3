import { SESv2Client, SendEmailCommand, type MessageTag, type SESv2ClientConfig } from '@aws-sdk/client-sesv2'
import { KeyedSha256 } from './keyed-sha256.js'
import { DeliveryError, errorIdentifier, type DeliveryFailureKind, type MailTransport, type OutgoingMessage } from './transport.js'

export interface SesTransportOptions {
  /** Upper bound for one send(), retries included. */
  timeoutMs: number
  /** Attempts per send, the first one included; defaults to 2. Ignored with `client`. */
  maxAttempts?: number
  configurationSet?: string
  /**
   * A ready-made client, used as is and left open by close(). Without it the transport builds
   * its own from the standard AWS environment (AWS_REGION, the credential chain,
   * AWS_ENDPOINT_URL_SESV2), which the SDK reads itself.
   */
  client?: SESv2Client
  /** Overrides of the environment for the client the transport builds (tests, local emulators). */
  region?: string
  endpoint?: string
  credentials?: SESv2ClientConfig['credentials']
}

const DEFAULT_MAX_ATTEMPTS = 2
/** Concurrent sockets to SES; sends are short, so a few dozen carry a lot of traffic. */
const MAX_SOCKETS = 50

/** SES accepts at most 50 tags per message. */
const MAX_TAGS = 50
const MAX_TAG_LENGTH = 256
const TAG_DISALLOWED = /[^A-Za-z0-9_-]/g

/**
 * Maps message tags to SES EmailTags. SES refuses the whole send when a tag name or value has a
 * character outside [A-Za-z0-9_-] or more than 256 of them, so both are coerced rather than
 * trusted; tags that end up empty are dropped, since SES requires a value.
 */
function sesTags (tags: Record<string, string>): MessageTag[] {
  const result: MessageTag[] = []
  for (const [name, value] of Object.entries(tags)) {
    if (result.length === MAX_TAGS) break
    const Name = name.replace(TAG_DISALLOWED, '_').slice(0, MAX_TAG_LENGTH)
    const Value = value.replace(TAG_DISALLOWED, '_').slice(0, MAX_TAG_LENGTH)
    if (Name !== '' && Value !== '') result.push({ Name, Value })
  }
  return result
}

const CONNECTION_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH',
  'ENETUNREACH', 'ENETDOWN', 'EPIPE', 'EPROTO', 'ERR_SOCKET_CONNECTION_TIMEOUT'
])
const THROTTLING_NAMES = new Set([
  'TooManyRequestsException', 'LimitExceededException', 'ThrottlingException', 'Throttling',
  'ThrottledException', 'RequestLimitExceeded'
])
const REJECTION_NAMES = new Set([
  'MessageRejected', 'MailFromDomainNotVerifiedException', 'AccountSuspendedException',
  'SendingPausedException', 'BadRequestException'
])

/** The fields of an SDK or Node error this module looks at; all of them optional. */
interface ErrorShape {
  name?: unknown
  code?: unknown
  $metadata?: { httpStatusCode?: unknown, requestId?: unknown }
  $retryable?: { throttling?: unknown }
}

function shapeOf (error: unknown): ErrorShape {
  return typeof error === 'object' && error !== null ? error as ErrorShape : {}
}

function classify (shape: ErrorShape, name: string | undefined, code: string | undefined, status: number | undefined): DeliveryFailureKind {
  // The code first: the SDK names a reset connection TimeoutError, for its retry rules.
  if (code !== undefined && CONNECTION_CODES.has(code)) return 'connection'
  if (name === 'AbortError' || name === 'TimeoutError' || code === 'ETIMEDOUT') return 'timeout'
  if ((name !== undefined && THROTTLING_NAMES.has(name)) || status === 429 || shape.$retryable?.throttling === true) {
    return 'throttled'
  }
  if (name !== undefined && REJECTION_NAMES.has(name)) return 'rejected'
  // NotFoundException names a configuration set or identity the account lacks: an operator's
  // error no retry on this provider fixes, but another provider may still deliver.
  if (name === 'NotFoundException' || (status !== undefined && status >= 500)) return 'provider'
  return 'unknown'
}

/** Turns whatever the SDK threw into a DeliveryError whose message holds no address or body. */
function toDeliveryError (error: unknown, deadlinePassed: boolean): DeliveryError {
  const shape = shapeOf(error)
  const name = errorIdentifier(shape.name)
  const code = errorIdentifier(shape.code)
  const status = typeof shape.$metadata?.httpStatusCode === 'number' ? shape.$metadata.httpStatusCode : undefined
  const requestId = errorIdentifier(shape.$metadata?.requestId)
  // Past the deadline the SDK reports the abort under various names; the cause is the deadline.
  const kind = deadlinePassed ? 'timeout' : classify(shape, name, code, status)
  const details = [
    name ?? 'Error',
    code !== undefined && code !== name ? `code ${code}` : undefined,
    status !== undefined ? `HTTP ${status}` : undefined,
    requestId !== undefined ? `request ${requestId}` : undefined
  ].filter((part) => part !== undefined)
  // The SDK error is not attached as the cause: loggers print causes, and its message may
  // quote the recipient.
  return new DeliveryError(kind, `SES send failed (${kind}): ${details.join(', ')}`)
}

/** Sends through the Amazon SES v2 API. */
export class SesTransport implements MailTransport {
  readonly name = 'ses'
  readonly #client: SESv2Client
  readonly #ownsClient: boolean
  readonly #timeoutMs: number
  readonly #configurationSet: string | undefined
  #closed = false

  constructor (options: SesTransportOptions) {
    if (!Number.isFinite(options.timeoutMs) || options.timeoutMs <= 0) {
      throw new RangeError('timeoutMs must be a positive number')
    }
    this.#timeoutMs = options.timeoutMs
    this.#configurationSet = options.configurationSet
    if (options.client !== undefined) {
      this.#client = options.client
      this.#ownsClient = false
      return
    }
    const config: SESv2ClientConfig = {
      sha256: KeyedSha256,
      maxAttempts: options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      requestHandler: {
        // Per attempt. The abort signal in send() bounds the whole call, retries included.
        connectionTimeout: options.timeoutMs,
        requestTimeout: options.timeoutMs,
        // Without it a request timeout is only logged (to the console) and the call waits on.
        throwOnRequestTimeout: true,
        // Keep-alive spares a TCP and TLS handshake per mail. http for local emulators.
        httpsAgent: { keepAlive: true, maxSockets: MAX_SOCKETS },
        httpAgent: { keepAlive: true, maxSockets: MAX_SOCKETS }
      }
    }
    if (options.region !== undefined) config.region = options.region
    if (options.endpoint !== undefined) config.endpoint = options.endpoint
    if (options.credentials !== undefined) config.credentials = options.credentials
    this.#client = new SESv2Client(config)
    this.#ownsClient = true
  }

  async send (message: OutgoingMessage): Promise<void> {
    if (this.#closed) throw new DeliveryError('connection', 'SES transport is closed')
    const tags = sesTags(message.tags)
    const command = new SendEmailCommand({
      FromEmailAddress: message.from,
      Destination: { ToAddresses: [message.to] },
      ReplyToAddresses: message.replyTo !== undefined ? [message.replyTo] : undefined,
      Content: {
        Simple: {
          Subject: { Data: message.subject, Charset: 'UTF-8' },
          Body: {
            Text: { Data: message.text, Charset: 'UTF-8' },
            Html: { Data: message.html, Charset: 'UTF-8' }
          }
        }
      },
      EmailTags: tags.length > 0 ? tags : undefined,
      ConfigurationSetName: this.#configurationSet
    })
    const deadline = AbortSignal.timeout(this.#timeoutMs)
    try {
      await this.#client.send(command, { abortSignal: deadline })
    } catch (error) {
      throw toDeliveryError(error, deadline.aborted)
    }
  }

  /**
   * Whether a region is configured: the one setting without which no send can work. Resolving
   * it reads the environment and config files once (the SDK memoizes it) and never calls AWS,
   * so probes stay cheap; credentials are left to fail, visibly, on the first send.
   */
  async ready (): Promise<boolean> {
    if (this.#closed) return false
    try {
      const region = await this.#client.config.region()
      return typeof region === 'string' && region !== ''
    } catch {
      return false
    }
  }

  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#ownsClient) this.#client.destroy()
  }
}
