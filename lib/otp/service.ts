import { createHash } from 'node:crypto'
import { laneOf, bothLanes, dispatchPlan, laneSubject, refusalPlan, verifyPlan, type AdmissionPolicy, type Requester } from '../admission/plan.js'
import type { DispatchPlan, RefusalPlan } from '../state/admission.js'
import type { AdmissionGate, Headers } from '../admission/gate.js'
import type { State } from '../state/index.js'
import { apiError, type ApiError } from '../errors.js'
import { composeVerificationMessage } from '../mail/templating/message.js'
import type { DeliveredBy, Mailer } from '../mail/delivery/mailer.js'
import { DeliveryError, type DeliveryFailureKind, type OutgoingMessage } from '../mail/delivery/transport.js'
import { sourceBucket } from '../net/source-address.js'
import { quotaHeaders } from '../quota/allowance.js'
import type { QuotaDecision } from '../state/quota.js'
import { describeEmailRejection, validateEmail, type ValidatedEmail } from '../recipients/address.js'
import type { RecipientTagger } from '../recipients/tag.js'
import { tokenRecord } from '../state/tokens.js'
import type { VerificationLog } from '../state/verification-log.js'
import { isSandbox, type KeyMode } from '../keys/api-keys.js'
import type { ReputationGuard } from '../reputation/guard.js'
import type { TenantKey } from '../tenants/tenant.js'
import { tenantScope } from '../keys/scope.js'
import type { Receipts } from '../receipts/receipts.js'
import type { TenantTurns } from '../fairness/turns.js'
import { reachedQuotaThresholds, type EventSink } from '../webhooks/events.js'
import { GUESS_FORMAT, MINT_ATTEMPTS, mintCode } from './codes.js'
import type { CodeSigner } from './signer.js'

/** The structured logger the service writes to: pino's, request-scoped when there is a request. */
export interface Logger {
  info (fields: object, message: string): void
  warn (fields: object, message: string): void
  error (fields: object, message: string): void
}

/** Who is asking: the authenticated key (and through it the tenant) and where from. */
export interface Caller {
  key: TenantKey
  /** The client's address as the service trusts it (socket, or X-Forwarded-For from a trusted proxy). */
  address: string
  /**
   * The end user a backend calls for (End-User-IP, secret keys only), already checked:
   * per-source limits count it, and the backend's own address gets its own bucket.
   */
  endUserAddress?: string | null
  /**
   * The per-source bucket of a mesh caller counted apart from its address (an internal
   * workload's, or the one of every caller without an identity), used instead of the
   * address's. Null for a gateway's end clients and callers outside the mesh, counted by address.
   */
  meshSource?: string | null
  log: Logger
}

export interface DispatchInput {
  email: string
  /** BCP 47 language of the mail; else Accept-Language, else the tenant's default language. */
  locale?: string | undefined
  acceptLanguage?: string | undefined
  /**
   * Awaited right before the message is handed to the mailer (an Idempotency-Key's claim
   * records that the mail may leave). When it rejects nothing is sent, the dispatch is undone
   * and its error is the answer.
   */
  beforeSend?: (() => Promise<void>) | undefined
}

export type VerifyResult = 'verified' | 'mismatch' | 'malformed'

/** What the service tells the outside about finished requests: metrics, events. */
export interface OtpObserver {
  dispatched (key: TenantKey, result: { sentBy: string } | { deliveryFailed: DeliveryFailureKind }): void
  checked (key: TenantKey, result: VerifyResult): void
  /** A wrong guess locked its recipient for `lockMs`. */
  locked (key: TenantKey, requestId: string, lockMs: number): void
  /** A dispatch went to a review address (nothing sent, nothing charged). */
  reviewed (key: TenantKey): void
}

export interface OtpServiceOptions {
  policy: AdmissionPolicy
  signer: CodeSigner
  /** The mailboxes' tags that suppressions, lockouts and recipient buckets are kept under. */
  tagger: RecipientTagger
  /** Velocity, lockout, quota reservation and the token write: decides over the admission store. */
  gate: AdmissionGate
  /** The stores a failed delivery's clean-up and refund write to. */
  stores: Pick<State, 'tokens' | 'quota'>
  mailer: Pick<Mailer, 'send' | 'withhold'>
  /** What a tenant does not set itself: the code's lifetime and the sender. */
  defaults: { ttlSeconds: number, mailFrom: string }
  /** How long a suppressed mailbox gets no code. */
  suppressionMs: number
  ipv6BucketPrefix: number
  observer: OtpObserver
  /** The address hash a code's record carries, and the receipt a right guess answers. */
  receipts: Pick<Receipts, 'addressHash' | 'issue'>
  /** The tenants' webhooks: events are queued, never delivered on the request path. */
  events: Pick<EventSink, 'emit'>
  /** Whose message is composed next when several tenants' dispatches wait for the event loop. */
  turns: Pick<TenantTurns, 'run'>
  /** Each verification's story: recorded in passing, never awaited, never failing a request. */
  verifications: Pick<VerificationLog, 'start' | 'record'>
  /** The tenants' live sending reputation: paused tenants are refused, live sends and partner reports counted. */
  reputation: Pick<ReputationGuard, 'isPaused' | 'sent' | 'reported'>
}

/**
 * The stored form of a review address's code: its SHA-256 under a prefix no signing key id
 * can have (ids are letters, digits, `_` and `-`), so it never equals a signed code's form.
 */
function reviewForm (codeSha256: string): string {
  return `review:${codeSha256}`
}

/** The address and the tenant's domain policy: the validated address, or the refusal. */
function acceptableRecipient (address: string, key: TenantKey): { ok: true, email: ValidatedEmail } | { ok: false, refusal: ApiError } {
  const checked = validateEmail(address)
  if (!checked.ok) return { ok: false, refusal: apiError('INVALID_EMAIL', describeEmailRejection(checked.reason)) }
  const verdict = key.tenant.recipientPolicy.check(checked.email.domain)
  if (verdict === 'disposable') return { ok: false, refusal: apiError('RECIPIENT_BLOCKED', 'Codes cannot be sent to disposable email domains') }
  if (verdict === 'denied') return { ok: false, refusal: apiError('RECIPIENT_BLOCKED') }
  return { ok: true, email: checked.email }
}

/** A sent code's requestId, and the RateLimit-* and Quota-* headers of the answer. */
export interface Dispatched {
  requestId: string
  headers: Record<string, string>
}

/** A right guess: the signed receipt that proves it to the tenant's backend, and the headers. */
export interface Verified {
  receipt: string
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
    const { policy, signer, tagger, gate, mailer, defaults, observer, receipts, events, turns, verifications, reputation } = this.#options
    const { key, log } = caller
    const { tenant, mode } = key
    // Before the address is read: an over-limit caller's bad address answers 429 all the same
    // (plugins/refusals.ts), and checking one costs more than the rest of such a refusal.
    const own = refusalPlan(policy, this.#requester(caller))
    this.#refuseAtOnce(own)
    const recipient = acceptableRecipient(input.email, key)
    if (!recipient.ok) throw recipient.refusal
    const { email } = recipient

    const recipientTag = tagger.tag(email.canonical)
    const addressHash = receipts.addressHash(tenant, email.address)
    const ttlSeconds = tenant.ttlSeconds ?? defaults.ttlSeconds
    const review = tenant.reviewAddresses.get(email.address.toLowerCase())
    const reviewing = review !== undefined && review.expiresAtMs > Date.now()
    // A review address sends nothing, so spends no reputation; this process's copy of the pauses: no round trip.
    const live = !isSandbox(mode)
    const paused = live && !reviewing && reputation.isPaused(tenant.id)
    // A page's visitors are not told the tenant's deliverability: its dispatch passes the same
    // refusals and gets the same answer as a suppressed mailbox (a failed delivery), below.
    if (paused && laneOf(key) !== 'browser') throw apiError('TENANT_SENDING_PAUSED')
    for (let attempt = 0; attempt < MINT_ATTEMPTS; attempt++) {
      const subject = laneSubject(laneOf(key), recipientTag)
      const minted = mintCode(signer, tenant.id, mode, subject, addressHash)
      // A review address's code is fixed, kept only as its SHA-256: the record holds that.
      if (reviewing) minted.record = tokenRecord(reviewForm(review.codeSha256), subject, addressHash)
      const nowMs = Date.now()
      const plan = dispatchPlan(policy, {
        key,
        ownLimits: own.limits,
        recipientTag,
        token: { requestId: minted.requestId, record: minted.record, ttlMs: ttlSeconds * 1000 },
        nowMs
      })
      const decision = await gate.dispatch(plan)
      if (decision.kind === 'collision') continue
      if (decision.kind === 'refused') throw apiError(decision.refusal.code, decision.refusal.message, decision.refusal.headers)
      const admitted: Admitted = { plan, quota: decision.quota, headers: decision.headers }
      const story = { tenantId: tenant.id, mode, requestId: minted.requestId }
      verifications.start(story, plan.lane, { type: 'requested', at: new Date(nowMs).toISOString(), keyId: key.id, expiresAt: new Date(nowMs + ttlSeconds * 1000).toISOString() })
      // The one step whose cost a tenant sets (its templates): taken in turns with other tenants.
      const compose = async (): Promise<OutgoingMessage> => await turns.run(tenant.id, () => composeVerificationMessage({
        to: email.address,
        from: tenant.from ?? defaults.mailFrom,
        ...(tenant.replyTo === null ? {} : { replyTo: tenant.replyTo }),
        brand: tenant.brandName,
        code: minted.code,
        ttlSeconds,
        locale: tenant.templates.negotiate(input.locale, input.acceptLanguage),
        templates: tenant.templates,
        tags: { tenant: tenant.id, mode, requestId: minted.requestId },
        onTemplateFallback: (fallback) => {
          log.warn({ tenant: tenant.id, locale: fallback.locale, part: fallback.part, rule: fallback.rule }, 'template broke a rule for this message; sent the built-in wording')
        }
      }))
      if (decision.kind === 'withheld' || paused) {
        // Only a page's plan withholds, or gets here paused: its headers are a failed delivery's as they stand.
        const reason = paused ? 'sending_paused' : 'suppressed'
        await this.#withhold(caller, minted.requestId, admitted, compose, reason)
        verifications.record(story, { type: 'delivery_failed', at: new Date().toISOString(), reason })
        throw apiError('DELIVERY_FAILED', undefined, decision.headers)
      }
      if (reviewing) return await this.#reviewed(caller, minted.requestId, addressHash, admitted, compose)

      let deliveredBy: DeliveredBy
      let sendStarted: number | null = null
      try {
        const message = await compose()
        await input.beforeSend?.()
        sendStarted = performance.now()
        deliveredBy = await mailer.send(message, { mode, tenantId: tenant.id, requestId: minted.requestId, code: minted.code })
      } catch (error) {
        // A page's failed send answers after a send's time, as a withheld one does (#withhold).
        if (plan.lane === 'browser' && sendStarted !== null && error instanceof DeliveryError) {
          await mailer.withhold({ mode, tenantId: tenant.id }, performance.now() - sendStarted)
        }
        const refunded = await this.#undo(caller, minted.requestId, admitted)
        if (!(error instanceof DeliveryError)) throw error
        observer.dispatched(key, { deliveryFailed: error.kind })
        verifications.record(story, { type: 'delivery_failed', at: new Date().toISOString(), reason: error.kind })
        events.emit(tenant, mode, 'delivery.failed', { requestId: minted.requestId, addressHash, reason: error.kind })
        log.warn({ tenant: tenant.id, kind: error.kind, domain: email.domain }, 'delivery failed')
        // The headers tell the state after the refund: the tenant was not charged.
        if (plan.lane === 'browser') throw apiError('DELIVERY_FAILED', undefined, decision.headers)
        throw apiError('DELIVERY_FAILED', undefined, { ...decision.headers, ...quotaAfterRefund(admitted, refunded) })
      }
      observer.dispatched(key, { sentBy: deliveredBy.provider })
      if (live) reputation.sent(tenant.id)
      verifications.record(story, { type: 'sent', at: new Date().toISOString(), provider: deliveredBy.provider, ...(deliveredBy.messageId === null ? {} : { messageId: deliveredBy.messageId }) })
      // Once the mail left, so that a refunded unit never reports a threshold.
      const { quota } = decision
      const allowance = plan.quota.tenant
      for (const threshold of reachedQuotaThresholds(quota.used, allowance.limit)) {
        events.emit(tenant, mode, 'quota.threshold', {
          requestId: minted.requestId, threshold, limit: allowance.limit, used: quota.used, window: allowance.window.spec, resetsAt: new Date(quota.resetMs).toISOString()
        }, { key: `quota:${allowance.scope}:${quota.windowId}:${threshold}`, ttlMs: Math.max(1, quota.resetMs - Date.now()) })
      }
      log.info({ tenant: tenant.id, mode, keyId: key.id, requestId: minted.requestId, transport: deliveredBy.provider }, 'code dispatched')
      return { requestId: minted.requestId, headers: decision.headers }
    }
    throw new Error('could not allocate a unique requestId')
  }

  async verify (caller: Caller, requestId: string, rawGuess: string): Promise<Verified> {
    const { policy, signer, gate, observer, receipts, events, verifications } = this.#options
    const { key, log } = caller
    const own = refusalPlan(policy, this.#requester(caller))
    this.#refuseAtOnce(own)
    const guess = rawGuess.trim()
    const malformed = !GUESS_FORMAT.test(guess)
    // The same hashing for every guess, well-formed or not, stored or not: timing tells nothing.
    const storedForms = signer.storedForms({ tenantId: key.tenant.id, mode: key.mode, requestId }, guess)
    if (key.tenant.reviewAddresses.size > 0) storedForms.push(reviewForm(createHash('sha256').update(guess).digest('hex')))
    const decision = await gate.verify(verifyPlan(policy, {
      key,
      ownLimits: own.limits,
      requestId,
      storedForms: malformed ? [] : storedForms
    }))
    if (decision.kind === 'refused') throw apiError(decision.refusal.code, decision.refusal.message, decision.refusal.headers)
    const { tenant, mode } = key
    // Unknown, expired, used, locked and wrong all answer alike: nothing tells them apart. A
    // right guess on a record older than address hashes cannot have a receipt: it fails like
    // any code an upgrade leaves behind, and the user asks for a new one.
    const verifiedHash = decision.kind === 'verified' ? decision.addressHash : null
    const result: VerifyResult = malformed ? 'malformed' : verifiedHash !== null ? 'verified' : 'mismatch'
    observer.checked(key, result)
    log.info({ tenant: tenant.id, mode, requestId, result }, 'code checked')
    // Any guess that did not verify is a wrong guess of this requestId's story, whether or not a
    // code was still there (a story is only found for a requestId its tenant and mode dispatched).
    const story = { tenantId: tenant.id, mode, requestId }
    const at = new Date().toISOString()
    if (verifiedHash === null) verifications.record(story, { type: 'wrong_guess', at, reason: malformed ? 'malformed_code' : 'wrong_code' })
    if (decision.kind === 'mismatch' && decision.lockStartedMs > 0) verifications.record(story, { type: 'locked', at })
    if (decision.kind === 'mismatch' && decision.addressHash !== null) {
      const { addressHash, lockStartedMs } = decision
      events.emit(tenant, mode, 'verification.failed', { requestId, addressHash, reason: malformed ? 'malformed_code' : 'wrong_code' })
      if (lockStartedMs > 0) {
        observer.locked(key, requestId, lockStartedMs)
        events.emit(tenant, mode, 'recipient.locked', { requestId, addressHash, lockedUntil: new Date(Date.now() + lockStartedMs).toISOString() })
      }
    }
    if (result === 'malformed') throw apiError('INVALID_CODE_FORMAT', undefined, decision.headers)
    if (verifiedHash === null) throw apiError('CODE_MISMATCH', undefined, decision.headers)
    events.emit(tenant, mode, 'verification.succeeded', { requestId, addressHash: verifiedHash })
    verifications.record(story, { type: 'verified', at })
    // Signed on success only: a wrong guess costs no signature.
    return { receipt: await receipts.issue(key, requestId, verifiedHash), headers: decision.headers }
  }

  /**
   * Counts a request refused before admission (a malformed body, a bad or disposable address…)
   * against the caller's own limits, since it was a request all the same: the 429 instead of
   * `refusal` once that puts the caller past a limit.
   */
  async countRefused (caller: Caller, refusal: ApiError): Promise<ApiError> {
    const limited = await this.#options.gate.countRefused(refusalPlan(this.#options.policy, this.#requester(caller)))
    return limited === null ? refusal : apiError(limited.code, limited.message, limited.headers)
  }

  /**
   * Ends the locks of a recipient mailbox in the key's mode, in both lanes, and forgets its
   * wrong guesses (a tenant that has verified its user another way). True when the mailbox had
   * a lock or a run of failures in either lane.
   */
  async clearLockout (caller: Caller, address: string): Promise<boolean> {
    const { key } = caller
    const cleared = await this.#options.gate.clearLockout(bothLanes(key.tenant.id, key.mode, this.mailboxTag(address)))
    caller.log.info({ tenant: key.tenant.id, mode: key.mode, keyId: key.id, cleared }, 'recipient lockout cleared')
    return cleared
  }

  /**
   * Suppresses a recipient mailbox (every spelling) in the key's tenant and mode for the
   * configured time: a partner feeding the bounces and complaints it receives itself.
   */
  async suppress (caller: Caller, address: string): Promise<void> {
    const { key } = caller
    const fresh = await this.suppressMailbox(key.tenant.id, key.mode, this.mailboxTag(address))
    // A mailbox reported again (a partner retrying or mirroring) is one bounce, not several.
    if (fresh && !isSandbox(key.mode)) await this.#options.reputation.reported(key.tenant.id)
    caller.log.info({ tenant: key.tenant.id, mode: key.mode, keyId: key.id }, 'recipient suppressed')
  }

  /** Lifts a mailbox's suppression in the key's tenant and mode; true when there was one. */
  async unsuppress (caller: Caller, address: string): Promise<boolean> {
    const { key } = caller
    const lifted = await this.#options.gate.unsuppress({ tenantId: key.tenant.id, mode: key.mode, recipientTag: this.mailboxTag(address) })
    caller.log.info({ tenant: key.tenant.id, mode: key.mode, keyId: key.id, lifted }, 'recipient suppression lifted')
    return lifted
  }

  /** Suppresses the mailbox of `recipientTag` (see mailboxTag) in a tenant and mode. */
  async suppressMailbox (tenantId: string, mode: KeyMode, recipientTag: string): Promise<boolean> {
    return await this.#options.gate.suppress({ tenantId, mode, recipientTag }, this.#options.suppressionMs)
  }

  /** The keyed tag of an address's mailbox, as dispatch counts it; INVALID_EMAIL for a bad address. */
  mailboxTag (address: string): string {
    const checked = validateEmail(address)
    if (!checked.ok) throw apiError('INVALID_EMAIL', describeEmailRejection(checked.reason))
    return this.#options.tagger.tag(checked.email.canonical)
  }

  /** A caller remembered past a limit of its own gets its 429 before any keyed hash is computed for it. */
  #refuseAtOnce (own: RefusalPlan): void {
    const refusal = this.#options.gate.refusedAtOnce(own)
    if (refusal !== null) throw apiError(refusal.code, refusal.message, refusal.headers)
  }

  /** The caller's per-source buckets: the end user's when a backend forwards one, and the backend's own. */
  #requester (caller: Caller): Requester {
    const bucket = (address: string): string => sourceBucket(address, this.#options.ipv6BucketPrefix) ?? address
    const endUser = caller.endUserAddress ?? null
    // Behind a sidecar every caller has the sidecar's address: the workload tells them apart.
    const own = caller.meshSource === undefined || caller.meshSource === null ? bucket(caller.address) : caller.meshSource
    return endUser === null
      ? { key: caller.key, sourceBucket: own, backendBucket: null }
      : { key: caller.key, sourceBucket: bucket(endUser), backendBucket: own }
  }

  /**
   * A dispatch to a review address: nothing is sent, the unit is given back, and the use is
   * logged, counted and sent as `review.used`, so that a leaked review code shows. A page's
   * answer comes after a send's time, like any other dispatch's.
   */
  async #reviewed (caller: Caller, requestId: string, addressHash: string, admitted: Admitted, compose: () => Promise<OutgoingMessage>): Promise<Dispatched> {
    const { observer, events } = this.#options
    const { key, log } = caller
    const { tenant, mode } = key
    if (admitted.plan.lane === 'browser') {
      // A page's answer takes a send's time, as a withheld one does (#withhold): answering at
      // once told anyone typing addresses into the page which one was the review address.
      await compose()
      await this.#options.mailer.withhold({ mode, tenantId: tenant.id })
    }
    const { refunded } = await this.#refund(caller, admitted)
    // A mesh workload's own address is one it chose (X-Forwarded-For): name the bucket it is counted in.
    const source = caller.endUserAddress ?? caller.meshSource ?? caller.address
    observer.reviewed(key)
    log.warn({ tenant: tenant.id, mode, keyId: key.id, source, requestId }, 'review address used: no mail sent, nothing charged')
    events.emit(tenant, mode, 'review.used', { requestId, addressHash, keyId: key.id, source })
    if (admitted.plan.lane === 'browser') return { requestId, headers: admitted.headers }
    return { requestId, headers: quotaAfterRefund(admitted, refunded.status === 'fulfilled') }
  }

  /**
   * A page's dispatch to a suppressed mailbox: a failed delivery in everything but the send.
   * The message is composed, the send's time passes (a provider round trip of the tenant's,
   * Mailer.withhold) and the code and the unit are taken back by the same undo, so the answer,
   * its timing and what the next requests meet are a failed delivery's: a page, which anyone can
   * type an address into, never learns that the address bounced or complained here.
   */
  async #withhold (caller: Caller, requestId: string, admitted: Admitted, compose: () => Promise<OutgoingMessage>, reason: 'suppressed' | 'sending_paused'): Promise<void> {
    const { key, log } = caller
    try {
      await compose()
      await this.#options.mailer.withhold({ mode: key.mode, tenantId: key.tenant.id })
    } finally {
      await this.#undo(caller, requestId, admitted)
    }
    log.info({ tenant: key.tenant.id, mode: key.mode, keyId: key.id, requestId, reason }, `${reason === 'suppressed' ? 'mailbox suppressed' : 'live sending of the tenant is paused'}: nothing sent, answered as a failed delivery`)
  }

  /**
   * After a failed send: the code is destroyed before the answer so it can never verify, and
   * the unit is given back so the tenant pays only for mail that left. True when refunded.
   */
  async #undo (caller: Caller, requestId: string, admitted: Admitted): Promise<boolean> {
    const { tenant, mode } = caller.key
    const [[deleted], { refunded, shareRefunded, countRefunded }] = await Promise.all([
      Promise.allSettled([this.#options.stores.tokens.delete({ tenantId: tenant.id, mode, requestId })]),
      this.#refund(caller, admitted)
    ])
    for (const outcome of [deleted, refunded, shareRefunded, countRefunded]) {
      if (outcome.status === 'rejected') caller.log.error({ err: outcome.reason, requestId }, 'cleanup after a failed dispatch failed (an unsent code expires by itself)')
    }
    return refunded.status === 'fulfilled'
  }

  /**
   * Gives back the unit an admitted dispatch took: from the tenant's allowance, and from the key's
   * share if it has one; and from its tenant's mailbox count, so that mail that never left does
   * not use up the tenant's reserve inside the mailbox cap.
   */
  async #refund (caller: Caller, { plan, quota }: Admitted): Promise<{ refunded: PromiseSettledResult<void>, shareRefunded: PromiseSettledResult<void>, countRefunded: PromiseSettledResult<void> }> {
    const { stores, gate } = this.#options
    const { tenant, mode, id } = caller.key
    const scope = tenantScope(tenant.id, mode)
    const [refunded, shareRefunded, countRefunded] = await Promise.allSettled([
      stores.quota.refund(scope, quota.windowId),
      plan.quota.share !== null ? stores.quota.refund(scope, quota.windowId, id) : Promise.resolve(),
      gate.refundMailboxCount(plan)
    ])
    return { refunded, shareRefunded, countRefunded }
  }
}

/** A dispatch the gate admitted: its plan, the unit it took and the headers it answers with. */
interface Admitted {
  plan: DispatchPlan
  quota: QuotaDecision
  headers: Headers
}

/** The tenant's quota headers once the unit is given back (as they stand when the refund failed). */
function quotaAfterRefund ({ plan, quota }: Admitted, refunded: boolean): Headers {
  const { limit } = plan.quota.tenant
  const state = refunded ? { remaining: Math.min(limit, quota.remaining + 1), resetMs: quota.resetMs } : quota
  return quotaHeaders(limit, state, Date.now())
}
