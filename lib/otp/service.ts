import type { AdmissionPolicy } from '../admission/plan.js'
import { dispatchPlan, verifyPlan } from '../admission/plan.js'
import type { Backend } from '../backend.js'
import { apiError } from '../errors.js'
import { composeVerificationMessage } from '../mail/compose.js'
import { negotiateLocale } from '../mail/locale.js'
import type { Mailer } from '../mail/mailer.js'
import { DeliveryError, type DeliveryFailureKind } from '../mail/transport.js'
import { sourceBucket } from '../net/source-address.js'
import { quotaHeaders } from '../quota/allowance.js'
import type { QuotaDecision } from '../quota/quota-store.js'
import { describeEmailRejection, validateEmail } from '../recipients/address.js'
import type { TenantKey } from '../tenants/registry.js'
import { tenantScope } from '../tenants/scope.js'
import { tokenKey } from '../tokens/token-store.js'
import { GUESS_FORMAT, MINT_ATTEMPTS, mintCode } from './codes.js'
import type { CodeSigner } from './signer.js'

/** The structured logger the service writes to: pino's, request-scoped when there is a request. */
export interface Logger {
  info (fields: object, message: string): void
  warn (fields: object, message: string): void
  error (fields: object, message: string): void
}

/** Who is asking: the authenticated key (and through it the tenant) and the client's address. */
export interface Caller {
  key: TenantKey
  /** The client's address as the service trusts it (socket, or X-Forwarded-For from a trusted proxy). */
  address: string
  log: Logger
}

export interface DispatchInput {
  email: string
  /** BCP 47 language of the mail; else Accept-Language, else English. */
  locale?: string | undefined
  acceptLanguage?: string | undefined
}

export type VerifyResult = 'verified' | 'mismatch' | 'malformed'

/** What the service tells the outside about finished requests: metrics, events. */
export interface OtpObserver {
  dispatched (key: TenantKey, result: 'sent' | { deliveryFailed: DeliveryFailureKind }): void
  checked (key: TenantKey, result: VerifyResult): void
}

export interface OtpServiceOptions {
  policy: AdmissionPolicy
  signer: CodeSigner
  backend: Pick<Backend, 'admission' | 'tokens' | 'quota'>
  mailer: Pick<Mailer, 'send'>
  /** What a tenant does not set itself: the code's lifetime and the sender. */
  defaults: { ttlSeconds: number, mailFrom: string }
  ipv6BucketPrefix: number
  observer: OtpObserver
}

/** A sent code's requestId, and the RateLimit-* and Quota-* headers of the answer. */
export interface Dispatched {
  requestId: string
  headers: Record<string, string>
}

/**
 * Proving control of an address: dispatch mails a code, verify checks a guess once. The whole
 * flow is here, with no HTTP in it: recipient policy, admission (velocity, lockout, quota and
 * the token write in one step), signing, sending, and the clean-up and refund after a failed
 * delivery. Refusals are thrown as ApiErrors carrying their stable code and headers.
 */
export class OtpService {
  readonly #options: OtpServiceOptions

  constructor (options: OtpServiceOptions) {
    this.#options = options
  }

  async dispatch (caller: Caller, input: DispatchInput): Promise<Dispatched> {
    const { policy, signer, backend, mailer, defaults, observer } = this.#options
    const { key, log } = caller
    const { tenant, mode } = key
    const checked = validateEmail(input.email)
    if (!checked.ok) throw apiError('INVALID_EMAIL', describeEmailRejection(checked.reason))
    const verdict = tenant.recipientPolicy.check(checked.email.domain)
    if (verdict === 'disposable') throw apiError('RECIPIENT_BLOCKED', 'Codes cannot be sent to disposable email domains')
    if (verdict === 'denied') throw apiError('RECIPIENT_BLOCKED')

    const recipientTag = signer.tag(checked.email.canonical)
    const ttlSeconds = tenant.ttlSeconds ?? defaults.ttlSeconds
    const source = this.#sourceBucket(caller.address)
    for (let attempt = 0; attempt < MINT_ATTEMPTS; attempt++) {
      const minted = mintCode(signer, tenant.id, mode, recipientTag)
      const nowMs = Date.now()
      const plan = dispatchPlan(policy, {
        key,
        sourceBucket: source,
        recipientTag,
        token: { key: minted.tokenKey, record: minted.record, ttlMs: ttlSeconds * 1000 },
        nowMs
      })
      const decision = await backend.admission.dispatch(plan)
      if (decision.kind === 'collision') continue
      if (decision.kind === 'refused') throw apiError(decision.refusal.code, decision.refusal.message, decision.refusal.headers)

      try {
        await mailer.send(composeVerificationMessage({
          to: checked.email.address,
          from: tenant.from ?? defaults.mailFrom,
          ...(tenant.replyTo === null ? {} : { replyTo: tenant.replyTo }),
          brand: tenant.brandName,
          code: minted.code,
          ttlSeconds,
          locale: negotiateLocale(input.locale, input.acceptLanguage),
          tags: { tenant: tenant.id, mode }
        }), { mode, tenantId: tenant.id, requestId: minted.requestId, code: minted.code })
      } catch (error) {
        const refunded = await this.#undo(caller, minted.tokenKey, minted.requestId, decision.quota)
        if (!(error instanceof DeliveryError)) throw error
        observer.dispatched(key, { deliveryFailed: error.kind })
        log.warn({ tenant: tenant.id, kind: error.kind, domain: checked.email.domain }, 'delivery failed')
        // The headers tell the state after the refund: the tenant was not charged.
        const state = refunded ? { remaining: Math.min(plan.quota.limit, decision.quota.remaining + 1), resetMs: decision.quota.resetMs } : decision.quota
        throw apiError('DELIVERY_FAILED', undefined, { ...decision.headers, ...quotaHeaders(plan.quota.limit, state, Date.now()) })
      }
      observer.dispatched(key, 'sent')
      log.info({ tenant: tenant.id, mode, keyId: key.id, requestId: minted.requestId }, 'code dispatched')
      return { requestId: minted.requestId, headers: decision.headers }
    }
    throw new Error('could not allocate a unique requestId')
  }

  async verify (caller: Caller, requestId: string, rawGuess: string): Promise<{ headers: Record<string, string> }> {
    const { policy, signer, backend, observer } = this.#options
    const { key, log } = caller
    const guess = rawGuess.trim()
    const malformed = !GUESS_FORMAT.test(guess)
    // The same hashing for every guess, well-formed or not, stored or not: timing tells nothing.
    const storedForms = signer.storedForms({ tenantId: key.tenant.id, mode: key.mode, requestId }, guess)
    const decision = await backend.admission.verify(verifyPlan(policy, {
      key,
      sourceBucket: this.#sourceBucket(caller.address),
      tokenKey: tokenKey(key.tenant.id, key.mode, requestId),
      storedForms: malformed ? [] : storedForms
    }))
    if (decision.kind === 'refused') throw apiError(decision.refusal.code, decision.refusal.message, decision.refusal.headers)
    const result: VerifyResult = malformed ? 'malformed' : decision.kind === 'verified' ? 'verified' : 'mismatch'
    observer.checked(key, result)
    log.info({ tenant: key.tenant.id, mode: key.mode, requestId, result }, 'code checked')
    if (result === 'malformed') throw apiError('INVALID_CODE_FORMAT', undefined, decision.headers)
    if (result === 'mismatch') throw apiError('CODE_MISMATCH', undefined, decision.headers)
    return { headers: decision.headers }
  }

  #sourceBucket (address: string): string {
    return sourceBucket(address, this.#options.ipv6BucketPrefix) ?? address
  }

  /**
   * After a failed send: the code is destroyed before the answer so it can never verify, and
   * the unit is given back so the tenant pays only for mail that left. True when refunded.
   */
  async #undo (caller: Caller, key: string, requestId: string, quota: QuotaDecision): Promise<boolean> {
    const { backend } = this.#options
    const { tenant, mode } = caller.key
    const [deleted, refunded] = await Promise.allSettled([
      backend.tokens.delete(key),
      backend.quota.refund(tenantScope(tenant.id, mode), quota.windowId)
    ])
    for (const outcome of [deleted, refunded]) {
      if (outcome.status === 'rejected') caller.log.error({ err: outcome.reason, requestId }, 'cleanup after a failed dispatch failed (an unsent code expires by itself)')
    }
    return refunded.status === 'fulfilled'
  }
}
