import { SESv2Client, SendBulkEmailCommand, SendEmailCommand, type BulkEmailEntryResult, type BulkEmailStatus, type MessageTag, type SESv2ClientConfig } from '@aws-sdk/client-sesv2'
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
  /**
   * The longest a message waits for batch-mates while a call to SES is in flight
   * (BATCH_WAIT_MS by default); 0 sends every message on its own.
   */
  batchWaitMs?: number
}

const DEFAULT_MAX_ATTEMPTS = 2
/** Concurrent sockets to SES; sends are short, so a few dozen carry a lot of traffic. */
const MAX_SOCKETS = 50

/**
 * While a call to SES is in flight, the messages that arrive meanwhile wait at most this long
 * and then leave together in one SendBulkEmail call (docs/delivery.md#batching-on-ses): a message
 * that finds no call in flight leaves at once.
 */
export const BATCH_WAIT_MS = 5
/** SendBulkEmail takes at most 50 destinations. */
const MAX_BATCH = 50
/** SES's bound on an entry's ReplacementTemplateData; a larger message leaves on its own. */
const MAX_REPLACEMENT_DATA = 262_144
/** SES documents 1 MB as the input of a send with an inline template; a batch that would pass it leaves first. */
const MAX_BATCH_CHARS = 1_000_000
/**
 * The inline template of a batch: each part is one variable, which each destination's
 * replacement data fills with its own rendered part, so every destination gets exactly what
 * SendEmail would have sent it. Inline templates take only simple substitutions, and SES
 * escapes nothing when it renders one ("SES doesn't escape HTML content when rendering the
 * HTML template", SES developer guide, advanced personalization).
 */
const BATCH_TEMPLATE = { Subject: '{{subject}}', Text: '{{text}}', Html: '{{html}}' }

/**
 * What each destination's status in a SendBulkEmail answer means, as the error SendEmail
 * throws for the same cause would (classify below).
 */
const ENTRY_KINDS: Record<Exclude<BulkEmailStatus, 'SUCCESS'>, DeliveryFailureKind> = {
  MESSAGE_REJECTED: 'rejected',
  INVALID_PARAMETER: 'rejected',
  MAIL_FROM_DOMAIN_NOT_VERIFIED: 'rejected',
  ACCOUNT_SUSPENDED: 'rejected',
  ACCOUNT_SENDING_PAUSED: 'rejected',
  CONFIGURATION_SET_SENDING_PAUSED: 'rejected',
  ACCOUNT_THROTTLED: 'throttled',
  ACCOUNT_DAILY_QUOTA_EXCEEDED: 'throttled',
  CONFIGURATION_SET_NOT_FOUND: 'provider',
  TEMPLATE_NOT_FOUND: 'provider',
  INVALID_SENDING_POOL_NAME: 'provider',
  TRANSIENT_FAILURE: 'provider',
  FAILED: 'unknown'
}

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

/** A message waiting for its batch, and how to answer its sender. */
interface Waiting {
  message: OutgoingMessage
  tags: MessageTag[]
  /** Its parts as one destination's ReplacementTemplateData. */
  data: string
  /** The message's own deadline, from the moment it was handed to send(). */
  deadline: AbortSignal
  resolve: (messageId: string | null) => void
  reject: (error: DeliveryError) => void
}

/** The messages of one sender (From, Reply-To) waiting for the calls in flight. */
interface Batch {
  entries: Waiting[]
  chars: number
  timer: NodeJS.Timeout
}

/** Messages share a SendBulkEmail call only when its request-wide fields are theirs alike. */
const senderKey = (message: OutgoingMessage): string => `${message.from}\n${message.replyTo ?? ''}`

/**
 * Sends through the Amazon SES v2 API. A message that finds no call in flight for its sender
 * leaves at once (SendEmail); the ones that arrive while calls are in flight wait at most
 * `batchWaitMs`, or until a call returns, and leave together (SendBulkEmail, one SDK command
 * for up to 50 destinations), each answered by its own destination's status.
 */
export class SesTransport implements MailTransport {
  readonly name = 'ses'
  readonly #client: SESv2Client
  readonly #ownsClient: boolean
  readonly #timeoutMs: number
  readonly #configurationSet: string | undefined
  readonly #batchWaitMs: number
  /** Calls in flight, by sender. */
  readonly #inFlight = new Map<string, number>()
  readonly #batches = new Map<string, Batch>()
  /** Every call in flight, so that close() lets them finish. */
  readonly #calls = new Set<Promise<void>>()
  #closed = false

  constructor (options: SesTransportOptions) {
    if (!Number.isFinite(options.timeoutMs) || options.timeoutMs <= 0) {
      throw new RangeError('timeoutMs must be a positive number')
    }
    const batchWaitMs = options.batchWaitMs ?? BATCH_WAIT_MS
    if (!Number.isFinite(batchWaitMs) || batchWaitMs < 0) throw new RangeError('batchWaitMs must be a number ≥ 0')
    this.#timeoutMs = options.timeoutMs
    this.#batchWaitMs = batchWaitMs
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
    // The SDK's logger step copies every command's input and output through its sensitive-data
    // filter for a logger that discards them (1% of an SES dispatch's CPU); an input holds the
    // codes, which this service never logs anyway.
    this.#client.middlewareStack.remove('loggerMiddleware')
    this.#ownsClient = true
  }

  async send (message: OutgoingMessage): Promise<string | null> {
    if (this.#closed) throw new DeliveryError('connection', 'SES transport is closed')
    const deadline = AbortSignal.timeout(this.#timeoutMs)
    const key = senderKey(message)
    const tags = sesTags(message.tags)
    const busy = (this.#inFlight.get(key) ?? 0) > 0 || this.#batches.has(key)
    if (this.#batchWaitMs === 0 || !busy) return await this.#sendAlone(key, message, tags, deadline)
    const data = JSON.stringify({ subject: message.subject, text: message.text, html: message.html })
    if (data.length > MAX_REPLACEMENT_DATA) return await this.#sendAlone(key, message, tags, deadline)
    return await new Promise<string | null>((resolve, reject) => {
      this.#enqueue(key, { message, tags, data, deadline, resolve, reject })
    })
  }

  #enqueue (key: string, waiting: Waiting): void {
    let batch = this.#batches.get(key)
    if (batch !== undefined && batch.chars + waiting.data.length > MAX_BATCH_CHARS) {
      this.#flush(key)
      batch = undefined
    }
    if (batch === undefined) {
      batch = { entries: [], chars: 0, timer: setTimeout(() => { this.#flush(key) }, this.#batchWaitMs) }
      this.#batches.set(key, batch)
    }
    batch.entries.push(waiting)
    batch.chars += waiting.data.length
    if (batch.entries.length === MAX_BATCH) this.#flush(key)
  }

  /** Sends the sender's waiting messages now: alone if it is one, else in one SendBulkEmail. */
  #flush (key: string): void {
    const batch = this.#batches.get(key)
    if (batch === undefined) return
    this.#batches.delete(key)
    clearTimeout(batch.timer)
    const [first] = batch.entries
    if (batch.entries.length === 1 && first !== undefined) {
      this.#sendAlone(key, first.message, first.tags, first.deadline).then(first.resolve, first.reject)
      return
    }
    this.#track(key, this.#sendBatch(key, batch.entries))
  }

  /** Counts a call in flight for its sender; when it returns, the sender's waiting messages leave. */
  #track (key: string, call: Promise<void>): Promise<void> {
    this.#inFlight.set(key, (this.#inFlight.get(key) ?? 0) + 1)
    const tracked = call.finally(() => {
      this.#calls.delete(tracked)
      const left = (this.#inFlight.get(key) ?? 1) - 1
      if (left === 0) this.#inFlight.delete(key)
      else this.#inFlight.set(key, left)
      this.#flush(key)
    })
    this.#calls.add(tracked)
    return tracked
  }

  async #sendAlone (key: string, message: OutgoingMessage, tags: MessageTag[], deadline: AbortSignal): Promise<string | null> {
    let failure: DeliveryError | undefined
    let messageId: string | null = null
    await this.#track(key, (async () => {
      try {
        const answer = await this.#client.send(new SendEmailCommand({
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
        }), { abortSignal: deadline })
        messageId = answer.MessageId ?? null
      } catch (error) {
        failure = toDeliveryError(error, deadline.aborted)
      }
    })())
    if (failure !== undefined) throw failure
    return messageId
  }

  /**
   * One SendBulkEmail for `entries`, under the deadline of the one that waited longest. Each
   * entry is answered by its own destination's status. A call refused as a whole (an HTTP 4xx
   * but throttling: a malformed request, a refused sender, credentials allowed SendEmail only)
   * sent nothing: each entry is sent again on its own, so that only its own cause answers it.
   * Any other failure of the call is each entry's failure, which the failover and the circuit
   * breaker then see per message, as they would for SendEmail.
   */
  async #sendBatch (key: string, entries: Waiting[]): Promise<void> {
    const deadline = entries[0]?.deadline ?? AbortSignal.timeout(this.#timeoutMs)
    let results: BulkEmailEntryResult[]
    try {
      const answer = await this.#client.send(new SendBulkEmailCommand({
        FromEmailAddress: entries[0]?.message.from,
        ReplyToAddresses: entries[0]?.message.replyTo !== undefined ? [entries[0].message.replyTo] : undefined,
        DefaultContent: { Template: { TemplateContent: BATCH_TEMPLATE, TemplateData: '{}' } },
        BulkEmailEntries: entries.map(({ message, tags, data }) => ({
          Destination: { ToAddresses: [message.to] },
          ReplacementEmailContent: { ReplacementTemplate: { ReplacementTemplateData: data } },
          ReplacementTags: tags.length > 0 ? tags : undefined
        })),
        ConfigurationSetName: this.#configurationSet
      }), { abortSignal: deadline })
      results = answer.BulkEmailEntryResults ?? []
    } catch (error) {
      const failure = toDeliveryError(error, deadline.aborted)
      const status = shapeOf(error).$metadata?.httpStatusCode
      const refused = failure.kind === 'rejected' || (typeof status === 'number' && status >= 400 && status < 500 && failure.kind !== 'throttled')
      for (const entry of entries) {
        if (refused) {
          this.#sendAlone(key, entry.message, entry.tags, entry.deadline).then(entry.resolve, entry.reject)
        } else {
          entry.reject(new DeliveryError(failure.kind, failure.message))
        }
      }
      return
    }
    for (const [index, entry] of entries.entries()) {
      const status = results[index]?.Status
      if (status === 'SUCCESS') {
        entry.resolve(results[index]?.MessageId ?? null)
        continue
      }
      // A status newer than this table is nothing we know, never a success.
      const kind = status !== undefined && Object.hasOwn(ENTRY_KINDS, status) ? ENTRY_KINDS[status] : 'unknown'
      entry.reject(new DeliveryError(kind, `SES send failed (${kind}): SendBulkEmail destination ${errorIdentifier(status) ?? 'without a status'}`))
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
    // Messages already handed over still leave, and calls in flight (each within its
    // deadline) finish, before the client goes.
    for (const key of [...this.#batches.keys()]) this.#flush(key)
    while (this.#calls.size > 0) await Promise.allSettled([...this.#calls])
    if (this.#ownsClient) this.#client.destroy()
  }
}
