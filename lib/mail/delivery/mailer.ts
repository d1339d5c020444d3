import type { Writable } from 'node:stream'
import type { SandboxInbox } from '../../state/sandbox-inbox.js'
import { isSandbox, type KeyMode } from '../../keys/api-keys.js'
import { RoundTrips } from './round-trips.js'
import { simulateDelivery } from './simulator.js'
import { FailoverTransport, type CircuitState, type FailoverObserver } from './failover.js'
import { LogTransport } from './log-transport.js'
import { SesTransport } from './ses-transport.js'
import { SmtpTransport } from './smtp-transport.js'
import { mailSendSpan } from '../../telemetry/spans.js'
import { DeliveryError, type DeliveredBy, type MailTransport, type OutgoingMessage } from './transport.js'

export interface DeliveryContext {
  mode: KeyMode
  tenantId: string
  requestId: string
  /** Kept only in the sandbox inbox, never for live mail. */
  code: string
}

/** How long one live message took to leave, by transport, and its outcome (`sent` or a failure kind). */
export type MailSendObserver = (transport: string, seconds: number, result: string) => void

const failureKind = (error: unknown): string => error instanceof DeliveryError ? error.kind : 'unknown'

/** What the mailer reads of the configuration (the Config fields of the same names). */
export interface MailerConfig {
  /** Live mail's providers, in the order a send tries them (or just `log`). */
  mailTransports: MailTransportName[]
  mailTimeoutMs: number
  /** When a provider of the list is skipped, and for how long. */
  mailBreaker: { failures: number, openMs: number }
  ses: { region: string | null, endpoint: string | null, configurationSet: string | null }
  smtpUrl: string | null
}

/** A provider MAIL_TRANSPORT names; `log` stands alone. */
export type MailTransportName = 'log' | 'ses' | 'smtp'

export type { DeliveredBy } from './transport.js'

const NO_OBSERVER: FailoverObserver = { failedOver () {}, skipped () {} }

export interface MailerOptions {
  /** Where sandbox mail lands. */
  sandboxInbox: SandboxInbox
  /** Where the log transport prints. */
  logOutput: Writable
  /** Told when a provider fails over to the next one or is skipped. */
  failover?: FailoverObserver
  /** Told how long each live message took to leave. */
  sent?: MailSendObserver
  /** The recent round trips a withheld send waits for (a fresh record when not given). */
  roundTrips?: RoundTrips
}

/**
 * Sends a verification message. Live mail goes through the configured transport. Sandbox
 * mail never leaves the service: it plays the simulator's reserved recipients, then lands in
 * the sandbox inbox (and, with the log transport, on the console people look at).
 */
export class Mailer {
  readonly #live: FailoverTransport
  readonly #logsLive: boolean
  readonly #log: LogTransport
  readonly #sandboxInbox: SandboxInbox
  readonly #timeoutMs: number
  readonly #observe: MailSendObserver | undefined
  readonly #roundTrips: RoundTrips

  constructor (config: MailerConfig, { sandboxInbox, logOutput, failover = NO_OBSERVER, sent: observe, roundTrips = new RoundTrips() }: MailerOptions) {
    this.#log = new LogTransport(logOutput)
    this.#logsLive = config.mailTransports[0] === 'log'
    this.#live = new FailoverTransport(config.mailTransports.map((name) => liveTransport(name, config, this.#log)), config.mailBreaker, failover)
    this.#sandboxInbox = sandboxInbox
    this.#timeoutMs = config.mailTimeoutMs
    this.#observe = observe
    this.#roundTrips = roundTrips
  }

  /** The providers live mail leaves through, in order (`ses,smtp`). */
  get transport (): string {
    return this.#live.name
  }

  /** Each live provider's circuit. */
  circuits (): Record<string, CircuitState> {
    return this.#live.circuits()
  }

  async send (message: OutgoingMessage, context: DeliveryContext): Promise<DeliveredBy> {
    if (!isSandbox(context.mode)) {
      const attributes = { tenant: context.tenantId, mode: context.mode, requestId: context.requestId }
      // The whole list's time, failovers included: what a page's failed or withheld dispatch takes (round-trips.ts).
      const sendStarted = performance.now()
      let accepted = false
      try {
        const sentBy = await this.#live.send(message, async (transport, attempt) => {
          const started = performance.now()
          let result = 'sent'
          try {
            await mailSendSpan(transport, attributes, attempt, failureKind)
          } catch (error) {
            result = failureKind(error)
            throw error
          } finally {
            this.#observe?.(transport, (performance.now() - started) / 1000, result)
          }
        })
        accepted = true
        return sentBy
      } finally {
        this.#roundTrips.record(context.tenantId, performance.now() - sendStarted, accepted)
      }
    }
    await simulateDelivery(message.to, this.#timeoutMs)
    await this.#sandboxInbox.add(context.tenantId, {
      requestId: context.requestId,
      to: message.to,
      from: message.from,
      subject: message.subject,
      text: message.text,
      html: message.html,
      code: context.code,
      createdAt: new Date().toISOString()
    }, message.pieces)
    if (this.#logsLive) await this.#log.send(message)
    return { provider: 'sandbox', messageId: null }
  }

  /**
   * For a page's dispatch that answers as a failed delivery, whether nothing was sent or the
   * provider refused after `refusedAfterMs`: takes as long as either would, from the tenant's
   * recent live mail (lib/mail/delivery/round-trips.ts); sandbox mail, nothing, as the simulator's
   * rejection (`fail@simulator.invalid`) waits for nothing.
   */
  async withhold (context: Pick<DeliveryContext, 'mode' | 'tenantId'>, refusedAfterMs?: number): Promise<void> {
    if (!isSandbox(context.mode)) await this.#roundTrips.imitate(context.tenantId, refusedAfterMs)
  }

  async ready (): Promise<boolean> {
    return await this.#live.ready()
  }

  async close (): Promise<void> {
    await this.#live.close()
  }
}

function liveTransport (name: MailTransportName, config: MailerConfig, log: LogTransport): MailTransport {
  switch (name) {
    case 'ses':
      return new SesTransport({
        timeoutMs: config.mailTimeoutMs,
        ...(config.ses.region === null ? {} : { region: config.ses.region }),
        ...(config.ses.endpoint === null ? {} : { endpoint: config.ses.endpoint }),
        ...(config.ses.configurationSet === null ? {} : { configurationSet: config.ses.configurationSet })
      })
    case 'smtp':
      // parseConfig guarantees SMTP_URL for this transport.
      return new SmtpTransport({ url: config.smtpUrl ?? '', timeoutMs: config.mailTimeoutMs })
    case 'log':
      return log
  }
}
