import { timingSafeEqual } from 'node:crypto'
import type { MemoryQuotaStore } from './quota-store.js'
import type { MemoryTokenStore } from './token-store.js'
import { splitRecord } from '../tokens.js'
import { ShareLru } from '../../lru/share-lru.js'
import { StoreFullError } from '../../store-errors.js'
import { quotaClaims, type AdmissionStore, type DispatchCounts, type Exceeded, type VerifyCounts } from '../admission.js'
import type { DispatchPlan, LimitHit, Mailbox, MailboxLanes, RefusalPlan, VerifyPlan, WindowCount } from '../admission.js'
import { tenantScope } from '../../keys/scope.js'
import { lockoutKey, lockoutShare, MemoryLockout } from './lockout.js'
import { MemoryVelocityCounter } from './velocity.js'

/**
 * Velocity buckets kept in process per share (one kind of limit of one tenant and mode, the
 * mailbox cap of one mode, or a tenant's mailbox counts in one mode); past this many the share's
 * least recently hit are forgotten.
 */
export const VELOCITY_BUCKETS_PER_SHARE = 50_000
/**
 * Mailboxes whose run of failures is kept in process per share (one lane of one tenant and
 * mode). A live run is never forgotten to make room: a full share refuses (503) what would
 * need a new one, in that lane of that tenant only.
 */
export const LOCKOUT_STATES_PER_SHARE = 100_000

/**
 * Suppressed mailboxes kept in process per tenant and mode; past it, the share's least
 * recently read are forgotten. Only the tenant itself (its secret keys, its mail's feedback)
 * adds to its share, so a full share forgets only that tenant's oldest suppressions.
 */
export const SUPPRESSIONS_PER_SHARE = 100_000

/**
 * The share of a limit's buckets: one per kind of limit, tenant and mode, the mailbox cap one
 * per mode. Within it a bucket is named by what it counts.
 */
function velocityShare (limit: LimitHit): string {
  return limit.name === 'mailbox' ? `mailbox:${limit.mode}` : `${limit.name}:${tenantScope(limit.tenantId, limit.mode)}`
}

/** The share of a tenant's mailbox counts (MailboxCap) in one mode: only its own dispatches displace them. */
function mailboxCountShare ({ tenantId, mode }: Mailbox): string {
  return `mailbox-count:${tenantScope(tenantId, mode)}`
}

function sameForm (stored: string, candidate: string): boolean {
  const a = Buffer.from(stored)
  const b = Buffer.from(candidate)
  return a.length === b.length && timingSafeEqual(a, b)
}

/**
 * Admission in one process (the embedded default), with the same decisions as the Redis
 * scripts, over this process's velocity, lockout, quota and token stores. Each step runs to
 * completion without yielding, so it is as atomic as a script.
 */
export class MemoryAdmission implements AdmissionStore {
  readonly #velocity: MemoryVelocityCounter
  readonly #lockout: MemoryLockout
  readonly #tokens: MemoryTokenStore
  readonly #quota: MemoryQuotaStore
  /** Per tenant scope: recipient tag → when its suppression ends (epoch ms). */
  readonly #suppressions: ShareLru<number>

  constructor (tokens: MemoryTokenStore, quota: MemoryQuotaStore, capacity: { velocityBucketsPerShare?: number, lockoutStatesPerShare?: number, suppressionsPerShare?: number } = {}) {
    this.#suppressions = new ShareLru(capacity.suppressionsPerShare ?? SUPPRESSIONS_PER_SHARE)
    this.#velocity = new MemoryVelocityCounter(capacity.velocityBucketsPerShare ?? VELOCITY_BUCKETS_PER_SHARE)
    this.#lockout = new MemoryLockout({ statesPerShare: capacity.lockoutStatesPerShare ?? LOCKOUT_STATES_PER_SHARE, shareOf: lockoutShare })
    this.#tokens = tokens
    this.#quota = quota
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchCounts> {
    const { mailbox, recipient, quota } = plan
    const lockout = lockoutKey(recipient.tenantId, recipient.mode, plan.laneSubject)
    const now = Date.now()
    const counts: WindowCount[] = []
    const own = this.#hit(plan.ownLimits, now, counts)
    if (own !== null) return { kind: 'limited', counts, exceeded: own }
    const lockedForMs = this.#lockout.lockedFor(lockout, now)
    if (lockedForMs > 0) return { kind: 'locked', counts, lockedForMs }
    const suppressed = this.#suppressedUntil(recipient) > now
    if (suppressed && plan.suppression === 'refuse') return { kind: 'suppressed', counts }
    // A code whose wrong guess could not be counted must not be sent.
    if (!this.#lockout.hasRoom(lockout, now)) throw lockoutFull()
    const shared = this.#hit(plan.sharedLimits, now, counts)
    if (shared !== null) return { kind: 'limited', counts, exceeded: shared }
    if (mailbox !== null) {
      const count = this.#velocity.hit(velocityShare(mailbox), mailbox.bucket, mailbox.windowMs, now)
      const withinReserve = this.#velocity.peek(mailboxCountShare(recipient), mailbox.bucket, now) < mailbox.reserve
      if (count.current > mailbox.max && !withinReserve) return { kind: 'limited', counts, exceeded: { limit: mailbox, count } }
    }
    const claims = quotaClaims(quota)
    const decision = this.#quota.reserveAll(claims, quota.nowMs)
    if (!decision.allowed) return { kind: 'quota_exceeded', counts, quota: decision }
    // The token comes last, as in the Redis script, but unlike the script this can fail after
    // the units are taken (a full store, a taken requestId): they are given back.
    const refund = async (): Promise<void> => { for (const claim of claims) await this.#quota.refund(claim.scope, decision.windowId, claim.share) }
    const { requestId, record, ttlMs } = plan.token
    let stored: boolean
    try {
      stored = await this.#tokens.put({ tenantId: recipient.tenantId, mode: recipient.mode, requestId }, record, ttlMs)
    } catch (error) {
      await refund()
      throw error
    }
    if (!stored) {
      await refund()
      return { kind: 'collision' }
    }
    if (mailbox !== null) this.#velocity.hit(mailboxCountShare(recipient), mailbox.bucket, mailbox.windowMs, now)
    return { kind: suppressed ? 'withheld' : 'issued', counts, quota: decision }
  }

  async verify (plan: VerifyPlan): Promise<VerifyCounts> {
    const now = Date.now()
    const counts: WindowCount[] = []
    const own = this.#hit(plan.ownLimits, now, counts)
    if (own !== null) return { kind: 'limited', counts, exceeded: own }
    const { token } = plan
    const record = this.#tokens.peek(token)
    if (record === null) return { kind: 'missing', counts }
    const shared = this.#hit(plan.sharedLimits, now, counts)
    if (shared !== null) return { kind: 'limited', counts, exceeded: shared }
    const { storedForm, laneSubject, addressHash } = splitRecord(record)
    const lockout = lockoutKey(token.tenantId, token.mode, laneSubject)
    const locked = this.#lockout.lockedFor(lockout, now) > 0
    // Refused before the code is used: it stays for a later try.
    if (!locked && !this.#lockout.hasRoom(lockout, now)) throw lockoutFull()
    this.#tokens.discard(token)
    if (locked) return { kind: 'locked', counts }
    let verified = false
    // Every form is compared, so timing does not tell which key matched.
    for (const form of plan.storedForms) if (sameForm(storedForm, form)) verified = true
    if (verified) {
      this.#lockout.clear(lockout)
      return { kind: 'verified', counts, addressHash }
    }
    return { kind: 'mismatch', counts, lockStartedMs: this.#lockout.recordFailure(lockout, plan.lockout, now), addressHash }
  }

  async count (plan: RefusalPlan): Promise<{ counts: WindowCount[], exceeded: Exceeded | null }> {
    const counts: WindowCount[] = []
    const exceeded = this.#hit(plan.limits, Date.now(), counts)
    return { counts, exceeded }
  }

  async clearLockout ({ tenantId, mode, laneSubjects }: MailboxLanes): Promise<boolean> {
    let cleared = false
    for (const subject of laneSubjects) if (this.#lockout.clear(lockoutKey(tenantId, mode, subject))) cleared = true
    return cleared
  }

  async suppress (mailbox: Mailbox, ttlMs: number): Promise<boolean> {
    const fresh = this.#suppressedUntil(mailbox) <= Date.now()
    this.#suppressions.set(tenantScope(mailbox.tenantId, mailbox.mode), mailbox.recipientTag, Date.now() + ttlMs)
    return fresh
  }

  async unsuppress (mailbox: Mailbox): Promise<boolean> {
    const active = this.#suppressedUntil(mailbox) > Date.now()
    this.#suppressions.delete(tenantScope(mailbox.tenantId, mailbox.mode), mailbox.recipientTag)
    return active
  }

  async refundMailboxCount ({ recipient, mailbox }: DispatchPlan): Promise<void> {
    if (mailbox !== null) this.#velocity.giveBack(mailboxCountShare(recipient), mailbox.bucket)
  }

  #suppressedUntil ({ tenantId, mode, recipientTag }: Mailbox): number {
    return this.#suppressions.get(tenantScope(tenantId, mode), recipientTag) ?? 0
  }

  /** Counts the limits in order into `counts`, up to the first one exceeded, which it returns. */
  #hit (limits: readonly LimitHit[], now: number, counts: WindowCount[]): Exceeded | null {
    for (const limit of limits) {
      const count = this.#velocity.hit(velocityShare(limit), limit.bucket, limit.windowMs, now)
      counts.push(count)
      if (count.current > limit.max) return { limit, count }
    }
    return null
  }
}

function lockoutFull (): StoreFullError {
  return new StoreFullError('lockout share', 'Too many recipients have recent wrong codes; retry later')
}
