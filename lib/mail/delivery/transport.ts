import type { BodyPieces } from '../../code-pieces.js'

/** A message ready to leave: every value is already rendered and header-safe. */
export interface OutgoingMessage {
  to: string
  from: string
  replyTo?: string
  subject: string
  text: string
  html: string
  /** Provider tags (tenant id, mode); never the address or the code. */
  tags: Record<string, string>
  /** The text and HTML as the pieces around the code, for the sandbox inbox: no provider sees them. */
  pieces?: BodyPieces
}

/**
 * Why a delivery failed, as far as the provider lets us tell. `provider`: an error on the
 * provider's side (an HTTP 5xx, a configuration set or identity the account lacks);
 * `unavailable`: every provider of the list was skipped by its open circuit. Only `rejected`
 * (the provider refused the address or the content) does not go to the next provider.
 */
export type DeliveryFailureKind = 'timeout' | 'connection' | 'throttled' | 'provider' | 'rejected' | 'unavailable' | 'unknown'

/** Thrown by a transport when the message did not leave. */
export class DeliveryError extends Error {
  readonly kind: DeliveryFailureKind
  constructor (kind: DeliveryFailureKind, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'DeliveryError'
    this.kind = kind
  }
}

/** Where a message went: the provider that accepted it (or `sandbox`), and its id of the message when it gives one. */
export interface DeliveredBy {
  provider: string
  messageId: string | null
}

/** One way out for mail (log, ses, smtp, the sandbox inbox). */
export interface MailTransport {
  readonly name: string
  /**
   * Resolves once the provider accepted the message, with the provider's id of it (SES's
   * MessageId, the SMTP Message-ID) or null when it gives none; rejects with DeliveryError otherwise.
   */
  send (message: OutgoingMessage): Promise<string | null>
  /** Whether the transport is usable right now (for /readyz). */
  ready (): Promise<boolean>
  close (): Promise<void>
}

/**
 * A provider error's name, code, command or request id, when it is just that. Anything else
 * is dropped: providers' messages and replies often quote the recipient ("… failed the
 * check: user@example.com"), and what a transport reports ends up in logs.
 */
export function errorIdentifier (value: unknown): string | undefined {
  return typeof value === 'string' && /^[A-Za-z0-9_.: -]{1,64}$/.test(value) ? value : undefined
}
