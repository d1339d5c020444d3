import { randomUUID } from 'node:crypto'
import { randomId } from '../../random-ids.js'
import { createTransport, type SMTPTransportOptions, type Transporter } from 'nodemailer'
import MimeNode from 'nodemailer/lib/mime-node'
import { encode as quotedPrintable, wrap as wrapQuotedPrintable } from 'nodemailer/lib/qp'
import { DeliveryError, errorIdentifier, type DeliveryFailureKind, type MailTransport, type OutgoingMessage } from './transport.js'

export interface SmtpTransportOptions {
  /**
   * smtps://[user[:pass]@]host[:port] for implicit TLS (port 465 by default), or
   * smtp://[user[:pass]@]host[:port] for STARTTLS, which is then required (port 587 by default).
   * smtp://…?tls=off sends in clear text: see parseSmtpUrl.
   */
  url: string
  /** Upper bound for one send(), connecting and queueing in the pool included. */
  timeoutMs: number
  /** Reuse connections across sends (default). */
  pool?: boolean
}

/**
 * The pool (bench/smtp-pool.ts, 50 sends in flight against a local sink, one run on a busy
 * machine): 10 connections carried 940 messages/s against 674 with nodemailer's default of 5,
 * at 353 against 404 µs of CPU per message; 20 or 50 gained nothing more. A connection is replaced after 100 messages (nodemailer's default),
 * within what relays commonly accept per connection; relays also cap connections per client
 * (Postfix: 50 by default), which 10 per instance leaves room under for a few instances.
 */
const MAX_CONNECTIONS = 10
const MAX_MESSAGES_PER_CONNECTION = 100

/**
 * Turns the URL into explicit nodemailer options. nodemailer could parse it itself, but it
 * copies every query parameter into its options (so a URL could switch off certificate checks
 * or set options we did not mean to expose); here only `tls=off` is understood and anything
 * else is refused at construction, not at the first send. Errors never quote the URL, which
 * may hold a password.
 */
function parseSmtpUrl (raw: string): SMTPTransportOptions {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new TypeError('SMTP URL is not a valid URL')
  }
  if (url.protocol !== 'smtp:' && url.protocol !== 'smtps:') {
    throw new TypeError('SMTP URL must start with smtp:// or smtps://')
  }
  if (url.hostname === '') throw new TypeError('SMTP URL has no host')
  for (const [key, value] of url.searchParams) {
    if (key !== 'tls' || value !== 'off') throw new TypeError('SMTP URL supports only the query tls=off')
  }
  const secure = url.protocol === 'smtps:'
  const plaintext = url.searchParams.get('tls') === 'off'
  if (secure && plaintext) throw new TypeError('SMTP URL cannot be smtps:// with tls=off')

  const options: SMTPTransportOptions = {
    // URL keeps IPv6 literals in brackets; sockets want them bare.
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    secure,
    // Mail must not leave in clear text over a network. The one exception is tls=off: local
    // test servers and relays listening on localhost, which have no certificate to offer and
    // where the traffic never crosses a wire. ignoreTLS then also skips an advertised
    // STARTTLS, whose self-signed certificate would fail verification.
    requireTLS: !secure && !plaintext,
    ignoreTLS: plaintext
  }
  if (url.port !== '') options.port = Number(url.port)
  if (url.username !== '' || url.password !== '') {
    options.auth = { user: decodeURIComponent(url.username), pass: decodeURIComponent(url.password) }
  }
  return options
}

/** RFC 2045's limit for a quoted-printable line. */
const QP_LINE_LENGTH = 76
/** Senders seen (a tenant's `From`): a few per tenant; the oldest goes first past the bound. */
const SENDER_CACHE_SIZE = 1000
const senders = new Map<string, string>()

/** The address of a `From` header, as nodemailer parses it for the envelope; parsed once per sender. */
function senderAddress (from: string): string {
  let address = senders.get(from)
  if (address === undefined) {
    const parsed = new MimeNode().setHeader('From', from).getEnvelope().from
    address = typeof parsed === 'string' ? parsed : ''
    if (senders.size >= SENDER_CACHE_SIZE) senders.delete(senders.keys().next().value as string)
    senders.set(from, address)
  }
  return address
}

/**
 * The message as one buffer and its envelope. nodemailer's own composition builds a tree of
 * MIME nodes and streams each header, boundary and encoded chunk through a pipeline to the
 * socket: one socket write each, and most of what a message cost (docs/performance.md). Here
 * nodemailer still writes the headers (addresses, encoded words, Date, Message-ID, the
 * boundary: `buildHeaders`, no stream), the two parts are quoted-printable as nodemailer would
 * encode them, and the message leaves as one raw buffer: one chunk through the SMTP data stream
 * (dot-stuffing, line ends), one socket write.
 */
function composeRaw (message: OutgoingMessage): { raw: Buffer, envelope: { from: string, to: string[] }, messageId: string } {
  const from = senderAddress(message.from)
  // nodemailer draws the boundary's random part from OpenSSL for every node it makes.
  const root = new MimeNode('multipart/alternative', { baseBoundary: randomId() })
  // nodemailer's own Message-ID draws five random buffers and parses the sender again.
  const messageId = `<${randomUUID()}@${from.includes('@') ? from.slice(from.lastIndexOf('@') + 1) : 'localhost'}>`
  root.setHeader({ From: message.from, To: message.to, Subject: message.subject, 'Message-ID': messageId })
  if (message.replyTo !== undefined) root.setHeader('Reply-To', message.replyTo)
  const headers = root.buildHeaders()
  const boundary = String(root.boundary)
  const part = (type: string, body: string): string =>
    `--${boundary}\r\nContent-Type: ${type}; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n${wrapQuotedPrintable(quotedPrintable(body), QP_LINE_LENGTH)}\r\n`
  const raw = Buffer.from(`${headers}\r\n\r\n${part('text/plain', message.text)}${part('text/html', message.html)}--${boundary}--\r\n`)
  return { raw, envelope: { from, to: [message.to] }, messageId }
}

/** The fields of a nodemailer error this module looks at; all of them optional. */
interface SmtpErrorShape {
  code?: unknown
  responseCode?: unknown
  command?: unknown
}

const TIMEOUT_CODES = new Set(['ETIMEDOUT', 'EABORT'])
/** The channel could not be secured; checked before reply codes, as a refused STARTTLS carries a 5yz. */
const TLS_CODES = new Set(['ETLS', 'EREQUIRETLS'])
const CONNECTION_CODES = new Set(['ECONNECTION', 'ECONNREFUSED', 'ECONNRESET', 'ESOCKET', 'EDNS', 'EPROXY'])
const REJECTION_CODES = new Set(['EENVELOPE', 'EAUTH', 'ENOAUTH', 'EMESSAGE'])

function classify (code: string | undefined, responseCode: number | undefined): DeliveryFailureKind {
  if (code !== undefined && TIMEOUT_CODES.has(code)) return 'timeout'
  if (code !== undefined && TLS_CODES.has(code)) return 'connection'
  // RFC 5321: 4yz is a transient failure (421 busy, 450/451/452 try later), 5yz a permanent one.
  if (responseCode !== undefined && responseCode >= 400 && responseCode < 500) return 'throttled'
  if (responseCode !== undefined && responseCode >= 500 && responseCode < 600) return 'rejected'
  if (code !== undefined && CONNECTION_CODES.has(code)) return 'connection'
  if (code !== undefined && REJECTION_CODES.has(code)) return 'rejected'
  return 'unknown'
}

/** Turns a nodemailer error into a DeliveryError whose message holds no address or body. */
function toDeliveryError (error: unknown, deadlinePassed: boolean): DeliveryError {
  const shape: SmtpErrorShape = typeof error === 'object' && error !== null ? error : {}
  const code = errorIdentifier(shape.code)
  const responseCode = typeof shape.responseCode === 'number' ? shape.responseCode : undefined
  const command = errorIdentifier(shape.command)
  const kind = deadlinePassed ? 'timeout' : classify(code, responseCode)
  const details = [
    code ?? 'Error',
    responseCode !== undefined ? `reply ${responseCode}` : undefined,
    command !== undefined ? `to ${command}` : undefined
  ].filter((part) => part !== undefined)
  // The nodemailer error is not attached as the cause: loggers print causes, and its message
  // carries the server's reply, which often quotes the recipient.
  return new DeliveryError(kind, `SMTP send failed (${kind}): ${details.join(', ')}`)
}

/** Sends through an SMTP server or relay. */
export class SmtpTransport implements MailTransport {
  readonly name = 'smtp'
  readonly #transporter: Transporter
  readonly #timeoutMs: number
  #closed = false

  constructor (options: SmtpTransportOptions) {
    if (!Number.isFinite(options.timeoutMs) || options.timeoutMs <= 0) {
      throw new RangeError('timeoutMs must be a positive number')
    }
    this.#timeoutMs = options.timeoutMs
    const smtp: SMTPTransportOptions = {
      ...parseSmtpUrl(options.url),
      // Each phase is bounded on its own; the abort signal in send() bounds their sum.
      connectionTimeout: options.timeoutMs,
      greetingTimeout: options.timeoutMs,
      socketTimeout: options.timeoutMs,
      logger: false,
      // Messages are plain strings; never let a content field be read from a file or URL.
      disableFileAccess: true,
      disableUrlAccess: true
    }
    this.#transporter = options.pool === false
      ? createTransport(smtp)
      : createTransport({ ...smtp, pool: true, maxConnections: MAX_CONNECTIONS, maxMessages: MAX_MESSAGES_PER_CONNECTION })
  }

  async send (message: OutgoingMessage): Promise<string | null> {
    if (this.#closed) throw new DeliveryError('connection', 'SMTP transport is closed')
    // nodemailer honours the signal at every stage: waiting in the pool queue, connecting,
    // and mid-conversation, where it closes the connection. message.tags have no SMTP
    // equivalent and are not sent.
    const deadline = AbortSignal.timeout(this.#timeoutMs)
    try {
      const { raw, envelope, messageId } = composeRaw(message)
      // Given the id, nodemailer does not make one up for the raw message (five random draws
      // and a parse of the sender); the header sent is the raw message's own.
      await this.#transporter.sendMail({ raw, envelope, messageId, signal: deadline })
      return messageId
    } catch (error) {
      throw toDeliveryError(error, deadline.aborted)
    }
  }

  /**
   * Usable until closed. Deliberately no connection per probe: a readiness check must not
   * load the relay, and a failing relay shows up in send() results.
   */
  async ready (): Promise<boolean> {
    return !this.#closed
  }

  /** Closes idle pooled connections now; one in the middle of a delivery finishes it first. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#transporter.close()
  }
}
