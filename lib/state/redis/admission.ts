import { randomBytes } from 'node:crypto'
import { Cluster } from 'ioredis'
import { quotaDecision, quotaSlot } from './quota-store.js'
import type { RedisClient } from './client.js'
import { redisClock, type RedisClock } from './fence.js'
import { ReplicaAcks, type TrackedWrite } from './replica-acks.js'
import { storeCall, StoreUnavailableError, storeUndo } from '../../store-errors.js'
import { quotaClaims, type AdmissionStore, type DispatchCounts, type Exceeded, type VerifyCounts } from '../admission.js'
import { assertLimit } from '../quota.js'
import type { DispatchPlan, LimitHit, Mailbox, MailboxCap, MailboxLanes, RefusalPlan, VerifyPlan, WindowCount } from '../admission.js'
import { limitKey, lockoutKey, lockoutKeyPrefix, mailboxCountKey, suppressionKey, tokenKey } from './keys.js'
import { defineKeyedScript, type KeyedScript } from './keyed-script.js'
import { packArgs, type PackedArgs } from './script-args.js'
import { COUNT_ARGS, COUNT_LUA, COUNTER_REFUND_ARGS, COUNTER_REFUND_LUA, DISPATCH, DISPATCH_ARGS, DISPATCH_LUA, MAILBOX_ARGS, MAILBOX_LUA, RESTORE_TOKEN_ARGS, RESTORE_TOKEN_LUA, UNDO_DISPATCH_ARGS, UNDO_DISPATCH_LUA, VERIFY, VERIFY_ARGS, VERIFY_LUA } from './scripts.js'

/*
 * The scripts (scripts.ts) are assembled from the Lua functions of the concerns they decide:
 * velocity, lockout, quota reservation and the token write and take. The keys of a tenant's request
 * carry its `{tenant:mode}` hash tag, so on a Cluster each script runs on one slot. The
 * service-wide mailbox bucket is tagged by the mailbox instead; on a single server or
 * Sentinel it is part of the dispatch script, on a Cluster it is counted by a second command
 * once the dispatch is admitted (and the dispatch undone if the mailbox is over its cap and the
 * dispatch script found the tenant past its reserve: the tenant's mailbox count is in its slot).
 * The verify script builds the lockout key from the tag it reads in the token (it cannot be
 * declared beforehand); the prefix it is given carries the same hash tag, so that key lives in
 * the token's slot.
 */

/*
 * Every script but the undo starts with the fence (lib/state/redis/fence.ts): its last argument is
 * the deadline by which it must start, else it does nothing. Their shebang makes Redis refuse
 * them whole when it is out of memory; the undo may always run, as it only gives back.
 */

/**
 * The most keys a script takes: a dispatch's token, lockout, two quota counters, the mailbox
 * bucket, the tenant's mailbox count, four limits (source, recipient, backend, key) and the
 * suppression, with room to spare.
 */
const MAX_KEYS = 12

const COMMANDS = {
  dispatch: { name: 'emailOtpAdmitDispatch', lua: DISPATCH_LUA, fenced: true },
  mailbox: { name: 'emailOtpAdmitMailbox', lua: MAILBOX_LUA, fenced: true },
  undo: { name: 'emailOtpUndoDispatch', lua: UNDO_DISPATCH_LUA, fenced: false },
  restore: { name: 'emailOtpRestoreToken', lua: RESTORE_TOKEN_LUA, fenced: false },
  verify: { name: 'emailOtpAdmitVerify', lua: VERIFY_LUA, fenced: true },
  count: { name: 'emailOtpCountRefused', lua: COUNT_LUA, fenced: true }
} as const

/** Gives back a unit of a tenant's mailbox count: one key, defined apart as its reply is no list. */
const REFUND_MAILBOX_COUNT = 'emailOtpRefundMailboxCount'

/** A verify attempt's id: this process's, and a count. Unique enough for one requestId's attempts. */
const PROCESS_ID = randomBytes(6).toString('base64url')
let attempts = 0
function nextAttempt (): string {
  attempts = (attempts + 1) % Number.MAX_SAFE_INTEGER
  return `${PROCESS_ID}${attempts.toString(36)}`
}

/**
 * The methods defineCommand adds. Arguments go as strings: ioredis encodes a number argument
 * several microseconds slower per call.
 */
type AdmissionCommands = Record<string, (...keysAndArgs: string[]) => Promise<unknown>>

function unexpected (what: string, reply: unknown): Error {
  return new Error(`unexpected reply from the ${what} admission script: ${JSON.stringify(reply)}`)
}

function numbers (reply: unknown, what: string): number[] {
  if (!Array.isArray(reply) || !reply.every((value) => typeof value === 'number')) throw unexpected(what, reply)
  return reply as number[]
}

function counts (reply: readonly number[], from: number): WindowCount[] {
  const result: WindowCount[] = []
  for (let index = from; index + 1 < reply.length; index += 2) result.push({ current: reply[index] as number, ttlMs: reply[index + 1] as number })
  return result
}

/** The limit a script reported exceeded (its 1-based position), checked against the plan. */
function exceededLimit (limits: readonly LimitHit[], hits: readonly WindowCount[], position: number | undefined, what: string, reply: unknown): Exceeded {
  const index = (position ?? 0) - 1
  const limit = limits[index]
  const count = hits[index]
  if (limit === undefined || count === undefined) throw unexpected(what, reply)
  return { limit, count }
}

/**
 * Admission in Redis: a dispatch or a verify is one EVALSHA (ioredis loads the script on
 * first use and after a restart or failover), atomic across every instance.
 */
export class RedisAdmission implements AdmissionStore {
  readonly #client: RedisClient
  readonly #clock: RedisClock
  readonly #commands: AdmissionCommands
  readonly #scripts: Record<keyof typeof COMMANDS, KeyedScript>
  /** A Cluster refuses a script whose keys live in different slots. */
  readonly #crossSlot: boolean
  readonly #acks: ReplicaAcks

  /**
   * `acks`: the replicas that must hold what a dispatch, a verify, a suppression or an unlock
   * wrote before it answers (none when not given).
   */
  constructor (client: RedisClient, acks: ReplicaAcks = new ReplicaAcks(client, { count: 0, timeoutMs: 0 })) {
    // On a Cluster each script once per number of keys (keyed-script.ts says why).
    this.#scripts = Object.fromEntries(Object.entries(COMMANDS).map(([command, { name, lua }]) => [command, defineKeyedScript(client, name, lua, MAX_KEYS)])) as Record<keyof typeof COMMANDS, KeyedScript>
    client.defineCommand(REFUND_MAILBOX_COUNT, { lua: COUNTER_REFUND_LUA, numberOfKeys: COUNTER_REFUND_ARGS.keys.length })
    this.#client = client
    this.#clock = redisClock(client)
    this.#commands = client as unknown as AdmissionCommands
    this.#crossSlot = !(client instanceof Cluster)
    this.#acks = acks
  }

  /**
   * Runs a script; its reply is numbers, but for the one string at `textAt` when given (the
   * verify script's address hash), which comes back as `text` and reads as 0 in `reply`.
   */
  async #run (command: keyof typeof COMMANDS, { keys, args }: { keys: readonly string[], args: readonly string[] }, textAt?: number): Promise<{ raw: unknown, reply: number[], text: string }> {
    const run = this.#scripts[command]
    const { fenced } = COMMANDS[command]
    const call = fenced ? storeCall : storeUndo
    const raw = await call(`${command} admission`, async () => await run(keys, fenced ? [...args, await this.#clock.deadline()] : args))
    if (textAt === undefined) return { raw, reply: numbers(raw, command), text: '' }
    const values: unknown[] = Array.isArray(raw) ? raw : []
    const text = values[textAt]
    if (typeof text !== 'string') throw unexpected(command, raw)
    return { raw, reply: numbers(values.map((value, index) => index === textAt ? 0 : value), command), text }
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchCounts> {
    const { recipient, quota, token } = plan
    const { tenantId, mode } = recipient
    const tokenAt = tokenKey(tenantId, mode, token.requestId)
    const limits = [...plan.ownLimits, ...plan.sharedLimits]
    const counters = quotaClaims(quota).map((claim) => {
      // Checked here, as in process: in the script a NaN limit would compare false and admit everything.
      assertLimit(claim.limit)
      return { limit: claim.limit, slot: quotaSlot(claim.scope, claim.window, quota.nowMs, claim.share) }
    })
    const slots = counters.map(({ slot }) => slot)
    const mailbox = this.#crossSlot ? plan.mailbox : null
    const reserve = plan.mailbox === null ? [] : [{ key: mailboxCountKey(tenantId, mode, plan.mailbox.bucket), max: plan.mailbox.reserve, windowMs: plan.mailbox.windowMs }]
    const call = packArgs(DISPATCH_ARGS, {
      tokenKey: tokenAt,
      lockoutKey: lockoutKey(tenantId, mode, plan.laneSubject),
      quotas: slots.map((slot) => slot.key),
      mailbox: mailbox === null ? [] : [limitKey(mailbox)],
      reserve: reserve.map(({ key }) => key),
      limits: limits.map(limitKey),
      suppressionKey: suppressionKey(tenantId, mode, recipient.recipientTag),
      record: token.record,
      ttlMs: token.ttlMs,
      ownLimits: plan.ownLimits.length,
      withhold: plan.suppression === 'withhold',
      quotaArgs: counters.map(({ limit, slot }) => ({ limit, expireAtMs: slot.expireAtMs })),
      mailboxArgs: mailbox === null ? [] : [mailbox],
      reserveArgs: reserve,
      limitArgs: limits
    })
    const undo = packArgs(UNDO_DISPATCH_ARGS, { tokenKey: tokenAt, counters: [...slots.map((slot) => slot.key), ...reserve.map(({ key }) => key)] })
    const issued = this.#acks.write(tokenAt)
    const { raw, reply } = await this.#run('dispatch', call).then(issued.landed, async (error: unknown) => {
      // No answer (or an unreadable one): the script may have run all the same, its reply
      // lost or late. The undo goes on the same connection, so Redis runs it after the
      // dispatch, and takes back whatever the dispatch did.
      await this.#run('undo', undo).catch(() => {})
      throw error
    })
    const verdict = reply[0]
    if (verdict === DISPATCH.collision) return { kind: 'collision' }
    const hits = counts(reply, 4)
    switch (verdict) {
      case DISPATCH.locked: return { kind: 'locked', counts: hits, lockedForMs: reply[1] ?? 0 }
      case DISPATCH.suppressed: return { kind: 'suppressed', counts: hits }
      case DISPATCH.limited: return { kind: 'limited', counts: hits, exceeded: exceededLimit(limits, hits, reply[1], 'dispatch', raw) }
      case DISPATCH.mailboxLimited:
        if (mailbox === null) throw unexpected('dispatch', raw)
        return { kind: 'limited', counts: hits, exceeded: { limit: mailbox, count: { current: reply[1] ?? 0, ttlMs: reply[2] ?? 0 } } }
      case DISPATCH.quotaExceeded:
      case DISPATCH.issued:
      case DISPATCH.withheld:
        break
      default: throw unexpected('dispatch', raw)
    }
    const decision = quotaDecision([reply[2], reply[3]], quota.tenant.limit, quotaSlot(quota.tenant.scope, quota.tenant.window, quota.nowMs))
    if (verdict === DISPATCH.quotaExceeded) return { kind: 'quota_exceeded', counts: hits, quota: decision }
    const writes = [issued]
    if (plan.mailbox !== null && mailbox === null) {
      const counted = this.#acks.write(limitKey(plan.mailbox))
      const over = await this.#mailboxOverCap(plan.mailbox, reply[1] === 1, undo, counted)
      if (over !== null) return { kind: 'limited', counts: hits, exceeded: over }
      writes.push(counted)
    }
    if (!await this.#acks.acknowledged(writes)) {
      // A code only the primary holds could vanish in a failover after its dispatch said 200
      // (on a Cluster, the mailbox's count on its own primary likewise).
      await this.#run('undo', undo).catch(() => {})
      throw new StoreUnavailableError('too few Redis replicas acknowledged the new code')
    }
    return { kind: verdict === DISPATCH.withheld ? 'withheld' : 'issued', counts: hits, quota: decision }
  }

  /**
   * On a Cluster: the mailbox bucket, counted once the dispatch is admitted; over its cap while
   * the tenant was past its reserve (`withinReserve`: as the dispatch script found it), or not
   * counted (the answer is then 503), the dispatch is undone with `undo`. `write` tracks the count.
   */
  async #mailboxOverCap (mailbox: MailboxCap, withinReserve: boolean, undo: PackedArgs, write: TrackedWrite): Promise<Exceeded | null> {
    let counted: { raw: unknown, reply: number[] }
    try {
      counted = await this.#run('mailbox', packArgs(MAILBOX_ARGS, { bucketKey: limitKey(mailbox), max: mailbox.max, windowMs: mailbox.windowMs })).then(write.landed)
    } catch (error) {
      await this.#run('undo', undo).catch(() => {})
      throw error
    }
    const [current, ttlMs] = counted.reply
    if (current === undefined || ttlMs === undefined) throw unexpected('mailbox', counted.raw)
    if (current <= mailbox.max || withinReserve) return null
    await this.#run('undo', undo)
    return { limit: mailbox, count: { current, ttlMs } }
  }

  /** Not fenced: a refund that lands late only brings the count closer to the mail that left. */
  async refundMailboxCount ({ recipient, mailbox }: DispatchPlan): Promise<void> {
    if (mailbox === null) return
    const { keys } = packArgs(COUNTER_REFUND_ARGS, { counter: mailboxCountKey(recipient.tenantId, recipient.mode, mailbox.bucket) })
    const refund = this.#commands[REFUND_MAILBOX_COUNT]
    if (refund === undefined) throw new Error(`${REFUND_MAILBOX_COUNT} is not defined`)
    await storeUndo('mailbox count refund', async () => await refund.call(this.#client, ...keys))
  }

  async verify (plan: VerifyPlan): Promise<VerifyCounts> {
    const { lockout: policy, token } = plan
    const tokenAt = tokenKey(token.tenantId, token.mode, token.requestId)
    const limits = [...plan.ownLimits, ...plan.sharedLimits]
    const attempt = nextAttempt()
    const call = packArgs(VERIFY_ARGS, {
      tokenKey: tokenAt,
      limits: limits.map(limitKey),
      lockoutPrefix: lockoutKeyPrefix(token.tenantId, token.mode),
      threshold: policy.threshold,
      baseMs: policy.baseMs,
      maxMs: policy.maxMs,
      resetAfterMs: policy.resetAfterMs,
      ownLimits: plan.ownLimits.length,
      forms: plan.storedForms,
      limitArgs: limits,
      attempt
    })
    const restore = packArgs(RESTORE_TOKEN_ARGS, { tokenKey: tokenAt, attempt })
    const used = this.#acks.write(tokenAt)
    const { raw, reply, text } = await this.#run('verify', call, 3).then(used.landed, async (error: unknown) => {
      // As for a dispatch: whatever the verify did, the caller answers 503 and retries, so the
      // token it may have consumed is put back, by a command Redis runs after it.
      await this.#run('restore', restore).catch(() => {})
      throw error
    })
    const hits = counts(reply, 4)
    const addressHash = text === '' ? null : text
    const consumed = reply[0] === VERIFY.mismatch || reply[0] === VERIFY.locked || reply[0] === VERIFY.verified
    if (consumed && !await this.#acks.acknowledged([used])) {
      // A code used only on the primary would be back on a promoted replica: put it back here
      // too, and let the caller retry.
      await this.#run('restore', restore).catch(() => {})
      throw new StoreUnavailableError('too few Redis replicas acknowledged the used code')
    }
    switch (reply[0]) {
      case VERIFY.limited: return { kind: 'limited', counts: hits, exceeded: exceededLimit(limits, hits, reply[1], 'verify', raw) }
      case VERIFY.missing: return { kind: 'missing', counts: hits }
      case VERIFY.locked: return { kind: 'locked', counts: hits }
      case VERIFY.verified: return { kind: 'verified', counts: hits, addressHash }
      case VERIFY.mismatch: return { kind: 'mismatch', counts: hits, lockStartedMs: reply[2] ?? 0, addressHash }
      default: throw unexpected('verify', raw)
    }
  }

  async count (plan: RefusalPlan): Promise<{ counts: WindowCount[], exceeded: Exceeded | null }> {
    const { raw, reply } = await this.#run('count', packArgs(COUNT_ARGS, { limits: plan.limits.map(limitKey), limitArgs: plan.limits }))
    const hits = counts(reply, 1)
    const position = reply[0]
    return { counts: hits, exceeded: position === 0 ? null : exceededLimit(plan.limits, hits, position, 'count', raw) }
  }

  async suppress ({ tenantId, mode, recipientTag }: Mailbox, ttlMs: number): Promise<boolean> {
    const key = suppressionKey(tenantId, mode, recipientTag)
    // EXISTS and SET in one transaction: two reports of one mailbox at once find it new only once.
    const replies = await this.#acknowledgedWrite('suppress', key, async () => await this.#client.multi().exists(key).set(key, '1', 'PX', Math.max(1, Math.round(ttlMs))).exec())
    const [[, existed] = [null, 0]] = replies ?? []
    return existed === 0
  }

  async unsuppress ({ tenantId, mode, recipientTag }: Mailbox): Promise<boolean> {
    const key = suppressionKey(tenantId, mode, recipientTag)
    return await this.#acknowledgedWrite('unsuppress', key, async () => await this.#client.del(key)) > 0
  }

  /** One DEL: a mailbox's lanes share their tenant's hash tag, so on a Cluster they live in one slot. */
  async clearLockout ({ tenantId, mode, laneSubjects }: MailboxLanes): Promise<boolean> {
    const keys = laneSubjects.map((subject) => lockoutKey(tenantId, mode, subject))
    return await this.#acknowledgedWrite('lockout clear', keys[0] ?? '', async () => await this.#client.del(...keys)) > 0
  }

  /**
   * A write whose answer promises its effect (a suppression, its end, an unlock), answered only
   * once replicas hold it. Without them it stays on the primary and the caller gets a 503: these
   * writes set a state, so the caller's retry comes to the same.
   */
  async #acknowledgedWrite<T> (what: string, key: string, command: () => Promise<T>): Promise<T> {
    const write = this.#acks.write(key)
    const result = await storeCall(what, command).then(write.landed)
    if (!await this.#acks.acknowledged([write])) throw new StoreUnavailableError(`too few Redis replicas acknowledged the ${what}`)
    return result
  }
}
