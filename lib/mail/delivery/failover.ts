import { DeliveryError, type DeliveredBy, type DeliveryFailureKind, type MailTransport, type OutgoingMessage } from './transport.js'

export interface BreakerPolicy {
  /** Consecutive failed sends that open the circuit. */
  failures: number
  /** How long an open circuit skips its provider before one probe may go. */
  openMs: number
}

export type CircuitState = 'closed' | 'open' | 'half-open'

/**
 * One provider's circuit: closed until `failures` sends in a row failed, then open for
 * `openMs`, then half-open: exactly one send (the probe) may go; its success closes the
 * circuit, its failure opens it again for `openMs`. Kept this small on purpose: libraries such
 * as opossum count a failure percentage over a rolling window and bring their own timeouts and
 * fallbacks, where a mail provider wants "N in a row" and one probe, with the transport's own
 * deadline bounding every call.
 */
export class CircuitBreaker {
  readonly #policy: BreakerPolicy
  readonly #now: () => number
  #failures = 0
  #openedAtMs: number | null = null
  #probing = false

  constructor (policy: BreakerPolicy, now: () => number = Date.now) {
    this.#policy = policy
    this.#now = now
  }

  get state (): CircuitState {
    if (this.#openedAtMs === null) return 'closed'
    return this.#now() - this.#openedAtMs < this.#policy.openMs ? 'open' : 'half-open'
  }

  /** Whether a send may try the provider now; a half-open circuit lets one probe through. */
  admit (): boolean {
    const state = this.state
    if (state === 'closed') return true
    if (state === 'open' || this.#probing) return false
    this.#probing = true
    return true
  }

  /** The provider took the message, or answered that it refuses it: it is alive. */
  succeeded (): void {
    this.#failures = 0
    this.#openedAtMs = null
    this.#probing = false
  }

  failed (): void {
    this.#probing = false
    if (this.#openedAtMs !== null) {
      this.#openedAtMs = this.#now()
      return
    }
    this.#failures++
    if (this.#failures >= this.#policy.failures) this.#openedAtMs = this.#now()
  }
}

/** What a send tells its observer. */
export interface FailoverObserver {
  /** `from` failed with `kind` and a later provider of the list remains to try. */
  failedOver (from: string, kind: DeliveryFailureKind): void
  /** `name` was skipped: its circuit is open. */
  skipped (name: string): void
}

/** Wraps one provider's attempt at a message. */
export type AttemptWrapper = (transport: string, attempt: () => Promise<void>) => Promise<void>

const directly: AttemptWrapper = async (_transport, attempt) => { await attempt() }

/** Only a refusal of the address or the content is final: another provider would refuse it too. */
function goesToNext (kind: DeliveryFailureKind): boolean {
  return kind !== 'rejected'
}

/**
 * Live mail over an ordered list of providers. A send tries them in order until one accepts:
 * each attempt is bounded by its transport's own timeout, so a send ends within their sum. A
 * `rejected` ends the send at once. With more than one provider each has a circuit breaker,
 * so a dead primary costs its timeout only until its circuit opens; with one provider there
 * is nothing to fail over to and every send tries it, as a single transport always did.
 */
export class FailoverTransport {
  readonly #providers: Array<{ transport: MailTransport, breaker: CircuitBreaker | null }>
  readonly #observer: FailoverObserver

  constructor (transports: MailTransport[], policy: BreakerPolicy, observer: FailoverObserver, now: () => number = Date.now) {
    if (transports.length === 0) throw new RangeError('at least one transport')
    const guarded = transports.length > 1
    this.#providers = transports.map((transport) => ({ transport, breaker: guarded ? new CircuitBreaker(policy, now) : null }))
    this.#observer = observer
  }

  get name (): string {
    return this.#providers.map((provider) => provider.transport.name).join(',')
  }

  /** Each provider's circuit state (`closed` for a lone provider). */
  circuits (): Record<string, CircuitState> {
    return Object.fromEntries(this.#providers.map(({ transport, breaker }) => [transport.name, breaker?.state ?? 'closed']))
  }

  /**
   * Resolves with the provider that accepted the message and its id of it; rejects with the last
   * DeliveryError. `around` wraps each provider's attempt (a span, a latency measurement).
   */
  async send (message: OutgoingMessage, around: AttemptWrapper = directly): Promise<DeliveredBy> {
    let last: DeliveryError | null = null
    for (const [index, { transport, breaker }] of this.#providers.entries()) {
      if (breaker !== null && !breaker.admit()) {
        this.#observer.skipped(transport.name)
        continue
      }
      try {
        let messageId: string | null = null
        await around(transport.name, async () => { messageId = await transport.send(message) })
        breaker?.succeeded()
        return { provider: transport.name, messageId }
      } catch (error) {
        if (!(error instanceof DeliveryError)) {
          breaker?.failed()
          throw error
        }
        if (!goesToNext(error.kind)) {
          breaker?.succeeded()
          throw error
        }
        breaker?.failed()
        last = error
        if (index < this.#providers.length - 1) this.#observer.failedOver(transport.name, error.kind)
      }
    }
    throw last ?? new DeliveryError('unavailable', 'every mail provider is skipped by its open circuit')
  }

  async ready (): Promise<boolean> {
    const states = await Promise.all(this.#providers.map(async ({ transport }) => await transport.ready()))
    return states.some((ready) => ready)
  }

  async close (): Promise<void> {
    await Promise.all(this.#providers.map(async ({ transport }) => { await transport.close() }))
  }
}
