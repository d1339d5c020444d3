import type { RedisClient } from './client.js'
import { WEBHOOK_INDEX, WEBHOOK_LEGACY, webhookTenantKeys } from './keys.js'
import {
  DEFAULT_PER_TENANT_CAP, claimFairly, deadLetterId, parseDeadLetterId, parseDelivery, revived, tenantOf,
  type Backlog, type ClaimedDelivery, type DeadLetter, type DeadReason, type Delivery, type EnqueueResult, type OnceKey, type ReplayResult, type TenantRoom, type WebhookQueue, type WebhookQueueLimits
} from '../webhook-queue.js'
import { packArgs, type PackedArgs } from './script-args.js'
import {
  WEBHOOK_ADD_DEAD_ARGS, WEBHOOK_ADD_DEAD_LUA, WEBHOOK_BACKLOG_ARGS, WEBHOOK_BACKLOG_LUA, WEBHOOK_BURY_ARGS, WEBHOOK_BURY_LUA, WEBHOOK_CLAIM_ARGS, WEBHOOK_CLAIM_LUA,
  WEBHOOK_COMPLETE_ARGS, WEBHOOK_COMPLETE_LUA, WEBHOOK_ENQUEUE_ARGS, WEBHOOK_ENQUEUE_LUA, WEBHOOK_ENTRY, WEBHOOK_INDEX_ARGS, WEBHOOK_INDEX_LUA, WEBHOOK_LEGACY_DONE_ARGS,
  WEBHOOK_LEGACY_DONE_LUA, WEBHOOK_LEGACY_TAKE_ARGS, WEBHOOK_LEGACY_TAKE_LUA, WEBHOOK_REPLAY_ARGS, WEBHOOK_REPLAY_LUA, WEBHOOK_REQUEUE_ARGS, WEBHOOK_REQUEUE_LUA,
  WEBHOOK_RETRY_ARGS, WEBHOOK_RETRY_LUA, WEBHOOK_UNINDEX_ARGS, WEBHOOK_UNINDEX_LUA
} from './scripts.js'

/*
 * Keys. Each tenant's queue has keys of its own, with the tenant in the hash tag, so that every
 * script on one tenant's queue runs on one Cluster slot and no tenant's backlog is in front of
 * another's:
 *   webhooks:{webhooks:<tenant>}:stream      deliveries to attempt, consumer group `workers`
 *   webhooks:{webhooks:<tenant>}:retry       sorted set: delivery JSON → epoch ms it is due again
 *   webhooks:{webhooks:<tenant>}:dead        stream of the tenant's dead letters (capped)
 *   webhooks:{webhooks:<tenant>}:once:<key>  exists while an event queued once per key may not be again
 * Stream and retry together hold at most the per-tenant cap; the dead letters as many.
 * Which tenants have work, in the {webhooks} slot:
 *   webhooks:{webhooks}:tenants              sorted set: tenant → version, the value of
 *   webhooks:{webhooks}:version              (a counter) when work was last added for it
 *   webhooks:{webhooks}:dead-tenants         set of the tenants that have had dead letters
 * The queue before it was split per tenant: drained into the tenants' queues (`migrate`):
 *   webhooks:{webhooks}:stream, :retry, :dead, and :legacy-lock (one instance drains at a time)
 * A consumer reads with XREADGROUP, so each delivery goes to one consumer; it settles it with
 * one script that first checks (XPENDING) that it still holds it: a consumer whose delivery
 * was taken over with XAUTOCLAIM (it looked dead) cannot settle it a second time.
 *
 * A tenant is indexed after work is added to its queue, and unindexed only by a claim that found
 * its queue empty, on condition that its version did not change meanwhile: work added after
 * that claim comes with a newer version, so it is never left unindexed.
 */
const INDEX = WEBHOOK_INDEX.tenants
const VERSION = WEBHOOK_INDEX.version
const DEAD_INDEX = WEBHOOK_INDEX.deadTenants
const LEGACY = WEBHOOK_LEGACY
const GROUP = 'workers'
const STREAM_ID = /^[0-9]{1,20}-[0-9]{1,20}$/
/** Deliveries drained from the old layout per claim. */
const LEGACY_BATCH = 500
/** How long the instance draining the old layout keeps the others off. */
const LEGACY_LOCK_MS = 30_000
/** Once the old layout was found empty, how long before looking again (an older instance may still queue there). */
const LEGACY_RECHECK_MS = 60_000

/** Names are specific to this service (and to this layout): defineCommand adds methods to a client others share. */
const COMMANDS = {
  enqueue: ['emailOtpTenantWebhookEnqueue', WEBHOOK_ENQUEUE_LUA, WEBHOOK_ENQUEUE_ARGS.keys.length],
  requeue: ['emailOtpTenantWebhookRequeue', WEBHOOK_REQUEUE_LUA, WEBHOOK_REQUEUE_ARGS.keys.length],
  claim: ['emailOtpTenantWebhookClaim', WEBHOOK_CLAIM_LUA, WEBHOOK_CLAIM_ARGS.keys.length],
  complete: ['emailOtpTenantWebhookComplete', WEBHOOK_COMPLETE_LUA, WEBHOOK_COMPLETE_ARGS.keys.length],
  retry: ['emailOtpTenantWebhookRetry', WEBHOOK_RETRY_LUA, WEBHOOK_RETRY_ARGS.keys.length],
  bury: ['emailOtpTenantWebhookBury', WEBHOOK_BURY_LUA, WEBHOOK_BURY_ARGS.keys.length],
  addDead: ['emailOtpTenantWebhookAddDead', WEBHOOK_ADD_DEAD_LUA, WEBHOOK_ADD_DEAD_ARGS.keys.length],
  replay: ['emailOtpTenantWebhookReplay', WEBHOOK_REPLAY_LUA, WEBHOOK_REPLAY_ARGS.keys.length],
  index: ['emailOtpWebhookIndex', WEBHOOK_INDEX_LUA, WEBHOOK_INDEX_ARGS.keys.length],
  unindex: ['emailOtpWebhookUnindex', WEBHOOK_UNINDEX_LUA, WEBHOOK_UNINDEX_ARGS.keys.length],
  legacyTake: ['emailOtpWebhookLegacyTake', WEBHOOK_LEGACY_TAKE_LUA, WEBHOOK_LEGACY_TAKE_ARGS.keys.length],
  legacyDone: ['emailOtpWebhookLegacyDone', WEBHOOK_LEGACY_DONE_LUA, WEBHOOK_LEGACY_DONE_ARGS.keys.length],
  backlog: ['emailOtpTenantWebhookBacklog', WEBHOOK_BACKLOG_LUA, WEBHOOK_BACKLOG_ARGS.keys.length]
} as const

type Command = (packed: PackedArgs) => Promise<unknown>

type StreamEntry = [id: string, fields: string[]]

function entries (reply: unknown): StreamEntry[] {
  if (!Array.isArray(reply)) throw new Error(`unexpected stream reply: ${JSON.stringify(reply)}`)
  return reply.filter((entry): entry is StreamEntry => Array.isArray(entry) && typeof entry[0] === 'string' && Array.isArray(entry[1]))
}

function field (entry: StreamEntry, name: string): string | undefined {
  const index = entry[1].indexOf(name)
  const value = index === -1 ? undefined : entry[1][index + 1]
  return typeof value === 'string' ? value : undefined
}

/** The delivery in a stream entry's `d` field; null for an entry that holds none. */
function deliveryOf (entry: StreamEntry): Delivery | null {
  const text = field(entry, WEBHOOK_ENTRY.delivery)
  return text === undefined ? null : parseDelivery(text)
}

function deadLetterOf (tenant: string, entry: StreamEntry): DeadLetter | null {
  const delivery = deliveryOf(entry)
  if (delivery === null) return null
  const reason: DeadReason = field(entry, WEBHOOK_ENTRY.reason) === 'overflow' ? 'overflow' : 'failed'
  return { id: deadLetterId(tenant, entry[0]), deadAtMs: Number(entry[0].split('-')[0]), reason, delivery }
}

/** What the last claim saw of a tenant whose queue had nothing waiting: skipped until `untilMs`, or until work is added. */
interface Idle {
  version: string
  untilMs: number
}

export interface RedisWebhookQueueOptions extends Partial<WebhookQueueLimits> {
  now?: () => number
}

/**
 * The webhook queue in Redis: durable across restarts of the service, shared by every
 * instance through one consumer group per tenant. Each call on a tenant's queue is one script,
 * one round trip; a claim reads the index of tenants with work, then claims from those tenants
 * in turn (one script each, in parallel).
 */
export class RedisWebhookQueue implements WebhookQueue {
  readonly #client: RedisClient
  readonly #commands: Record<keyof typeof COMMANDS, Command>
  readonly #perTenant: number
  readonly #now: () => number
  /** Where XAUTOCLAIM goes on, per tenant: it scans the pending entries a slice per claim. */
  readonly #cursors = new Map<string, string>()
  readonly #idle = new Map<string, Idle>()
  #turn = 0
  #legacyCheckAtMs = 0

  constructor (client: RedisClient, options: RedisWebhookQueueOptions = {}) {
    this.#client = client
    this.#perTenant = options.perTenant ?? DEFAULT_PER_TENANT_CAP
    this.#now = options.now ?? Date.now
    const bound = {} as Record<keyof typeof COMMANDS, Command>
    for (const [name, [command, lua, numberOfKeys]] of Object.entries(COMMANDS) as Array<[keyof typeof COMMANDS, typeof COMMANDS[keyof typeof COMMANDS]]>) {
      client.defineCommand(command, { lua, numberOfKeys })
      const method = (client as unknown as Record<string, (...keysAndArgs: string[]) => Promise<unknown>>)[command]
      if (method === undefined) throw new Error(`defineCommand did not add ${command}`)
      bound[name] = async (packed) => await method.call(client, ...packed.keys, ...packed.args)
    }
    this.#commands = bound
  }

  async enqueue (deliveries: readonly Delivery[], once?: OnceKey): Promise<EnqueueResult> {
    const tenant = tenantOf(deliveries)
    if (tenant === null) return { queued: false, overflowed: 0 }
    const keys = webhookTenantKeys(tenant)
    const reply = await this.#commands.enqueue(packArgs(WEBHOOK_ENQUEUE_ARGS, {
      ...keys,
      onceKey: once === undefined ? keys.stream : keys.once(once.key),
      group: GROUP,
      onceTtlMs: once === undefined ? 0 : Math.max(1, Math.ceil(once.ttlMs)),
      cap: this.#perTenant,
      deliveries: deliveries.map((delivery) => JSON.stringify(delivery))
    }))
    const [queued, overflowed] = Array.isArray(reply) ? reply.map(Number) : []
    if (queued !== 1) return { queued: false, overflowed: 0 }
    await this.#index(tenant, true, (overflowed ?? 0) > 0)
    return { queued: true, overflowed: overflowed ?? 0 }
  }

  async claim (consumer: string, max: number, stuckMs: number, room: TenantRoom = () => max): Promise<ClaimedDelivery[]> {
    const now = this.#now()
    const indexed = await this.#client.zrange(INDEX, '0', '-1', 'WITHSCORES')
    const versions = new Map<string, string>()
    for (let i = 0; i + 1 < indexed.length; i += 2) versions.set(indexed[i] as string, indexed[i + 1] as string)
    for (const tenant of [...this.#idle.keys()]) if (!versions.has(tenant)) this.#idle.delete(tenant)
    for (const tenant of [...this.#cursors.keys()]) if (!versions.has(tenant)) this.#cursors.delete(tenant)
    const tenants = [...versions].filter(([tenant, version]) => {
      const idle = this.#idle.get(tenant)
      return idle === undefined || idle.version !== version || idle.untilMs <= now
    }).map(([tenant]) => tenant)
    const start = tenants.length === 0 ? 0 : this.#turn++ % tenants.length
    const inTurn = [...tenants.slice(start), ...tenants.slice(0, start)]
    return await claimFairly(inTurn, max, room, async (tenant, want) => await this.#take(tenant, versions.get(tenant) ?? '', consumer, want, stuckMs, now))
  }

  async complete (consumer: string, claimed: ClaimedDelivery): Promise<void> {
    await this.#commands.complete(packArgs(WEBHOOK_COMPLETE_ARGS, { stream: webhookTenantKeys(claimed.delivery.tenant).stream, group: GROUP, entryId: claimed.entryId, consumer }))
  }

  async retry (consumer: string, claimed: ClaimedDelivery, delivery: Delivery, dueMs: number): Promise<void> {
    const keys = webhookTenantKeys(claimed.delivery.tenant)
    await this.#commands.retry(packArgs(WEBHOOK_RETRY_ARGS, { ...keys, group: GROUP, entryId: claimed.entryId, consumer, delivery: JSON.stringify(delivery), dueMs: Math.floor(dueMs) }))
  }

  async bury (consumer: string, claimed: ClaimedDelivery, delivery: Delivery): Promise<void> {
    const { tenant } = claimed.delivery
    const keys = webhookTenantKeys(tenant)
    if (await this.#commands.bury(packArgs(WEBHOOK_BURY_ARGS, { ...keys, group: GROUP, entryId: claimed.entryId, consumer, delivery: JSON.stringify(delivery), cap: this.#perTenant })) === 1) {
      await this.#index(tenant, false, true)
    }
  }

  async deadLetters (tenant: string | null, limit: number): Promise<DeadLetter[]> {
    const tenants = tenant === null ? (await this.#client.smembers(DEAD_INDEX)).sort() : [tenant]
    const letters: DeadLetter[] = []
    for (const name of tenants) {
      for (const entry of entries(await this.#client.xrevrange(webhookTenantKeys(name).dead, '+', '-', 'COUNT', limit))) {
        const letter = deadLetterOf(name, entry)
        if (letter !== null) letters.push(letter)
      }
    }
    // Newest first within a tenant already; merged by time (a stable sort keeps that order for ties).
    return letters.sort((a, b) => b.deadAtMs - a.deadAtMs).slice(0, limit)
  }

  async replay (tenant: string | null, ids: readonly string[] | null): Promise<ReplayResult> {
    const result: ReplayResult = { replayed: 0, unknown: [], full: 0 }
    if (ids !== null) {
      for (const id of ids) {
        const parsed = parseDeadLetterId(id)
        if (parsed === null || !STREAM_ID.test(parsed.localId) || (tenant !== null && parsed.tenant !== tenant)) {
          result.unknown.push(id)
          continue
        }
        const [entry] = entries(await this.#client.xrange(webhookTenantKeys(parsed.tenant).dead, parsed.localId, parsed.localId))
        const outcome = entry === undefined ? 0 : await this.#move(parsed.tenant, entry)
        if (outcome === 1) result.replayed++
        else if (outcome === 2) result.full++
        else result.unknown.push(id)
      }
      return result
    }
    for (const name of tenant === null ? (await this.#client.smembers(DEAD_INDEX)).sort() : [tenant]) {
      const dead = webhookTenantKeys(name).dead
      // Everything that is dead now, a page at a time; letters buried meanwhile stay.
      let remaining = await this.#client.xlen(dead)
      let from = '-'
      while (remaining > 0) {
        const page = entries(await this.#client.xrange(dead, from, '+', 'COUNT', Math.min(100, remaining)))
        if (page.length === 0) break
        let full = false
        for (const entry of page) {
          const outcome = await this.#move(name, entry)
          if (outcome === 1) result.replayed++
          if (outcome === 2) full = true
          if (full) break
        }
        if (full) {
          result.full += await this.#client.xlen(dead)
          break
        }
        remaining -= page.length
        from = `(${page[page.length - 1]?.[0] ?? ''}`
      }
    }
    return result
  }

  async backlog (tenant: string): Promise<Backlog> {
    const keys = webhookTenantKeys(tenant)
    const reply = await this.#commands.backlog(packArgs(WEBHOOK_BACKLOG_ARGS, keys))
    if (!Array.isArray(reply) || typeof reply[0] !== 'number') throw new Error(`unexpected reply from the webhook backlog script: ${JSON.stringify(reply)}`)
    return { depth: reply[0], oldestCreatedAtMs: typeof reply[1] === 'string' ? Number(reply[1]) : null }
  }

  /**
   * Drains the queue as it was before it was split per tenant (one stream, retry set and dead
   * stream for everyone), a batch at a time, into the tenants' own queues, under their caps:
   * new entries to the tenant's stream, retries to its retries (due when they were), dead
   * letters to its dead letters. One instance at a time; stream entries are read through the
   * old consumer group, so an instance of the previous version still running neither loses nor
   * shares one. Returns, per tenant, the deliveries the move pushed out of a full queue.
   */
  async migrate (consumer: string, stuckMs: number): Promise<Map<string, number>> {
    const overflowed = new Map<string, number>()
    const now = this.#now()
    if (now < this.#legacyCheckAtMs) return overflowed
    const reply = await this.#commands.legacyTake(packArgs(WEBHOOK_LEGACY_TAKE_ARGS, { ...LEGACY, group: GROUP, consumer, stuckMs: String(stuckMs), batch: LEGACY_BATCH, lockMs: String(LEGACY_LOCK_MS) }))
    if (!Array.isArray(reply) || reply[0] !== 2) {
      this.#legacyCheckAtMs = reply !== null && Array.isArray(reply) && reply[0] === 0 ? now + LEGACY_RECHECK_MS : 0
      return overflowed
    }
    const [, streamReply, retryReply, deadReply] = reply as [number, unknown, string[], unknown]
    const fresh = new Map<string, Delivery[]>()
    const retries = new Map<string, Array<[string, string]>>()
    const dead = new Map<string, string[]>()
    const add = <T>(map: Map<string, T[]>, tenant: string, item: T): void => {
      const list = map.get(tenant)
      if (list === undefined) map.set(tenant, [item])
      else list.push(item)
    }
    const takenIds: string[] = []
    for (const entry of entries(streamReply)) {
      takenIds.push(entry[0])
      const delivery = deliveryOf(entry)
      if (delivery !== null) add(fresh, delivery.tenant, delivery)
    }
    for (let i = 0; i + 1 < retryReply.length; i += 2) {
      const delivery = parseDelivery(retryReply[i] as string)
      if (delivery !== null) add(retries, delivery.tenant, [retryReply[i + 1] as string, retryReply[i] as string])
    }
    const deadIds: string[] = []
    for (const entry of entries(deadReply)) {
      deadIds.push(entry[0])
      const delivery = deliveryOf(entry)
      if (delivery !== null) add(dead, delivery.tenant, field(entry, WEBHOOK_ENTRY.delivery) as string)
    }
    const tenants = new Set([...fresh.keys(), ...retries.keys(), ...dead.keys()])
    for (const tenant of tenants) {
      const keys = webhookTenantKeys(tenant)
      let moved = 0
      const queued = fresh.get(tenant) ?? []
      if (queued.length > 0) {
        const enqueued = await this.#commands.enqueue(packArgs(WEBHOOK_ENQUEUE_ARGS, { ...keys, onceKey: keys.stream, group: GROUP, onceTtlMs: 0, cap: this.#perTenant, deliveries: queued.map((delivery) => JSON.stringify(delivery)) }))
        moved += Array.isArray(enqueued) ? Number(enqueued[1]) : 0
      }
      const due = retries.get(tenant) ?? []
      if (due.length > 0) moved += Number(await this.#commands.requeue(packArgs(WEBHOOK_REQUEUE_ARGS, { ...keys, group: GROUP, cap: this.#perTenant, retries: due.map(([dueMs, delivery]) => ({ dueMs, delivery })) })))
      const letters = dead.get(tenant) ?? []
      if (letters.length > 0) await this.#commands.addDead(packArgs(WEBHOOK_ADD_DEAD_ARGS, { dead: keys.dead, cap: this.#perTenant, deliveries: letters }))
      await this.#index(tenant, queued.length + due.length > 0, moved > 0 || letters.length > 0)
      if (moved > 0) overflowed.set(tenant, moved)
    }
    const retryMembers = retryReply.filter((_, index) => index % 2 === 0)
    await this.#commands.legacyDone(packArgs(WEBHOOK_LEGACY_DONE_ARGS, { ...LEGACY, group: GROUP, consumer, takenIds, retryMembers, deadIds }))
    return overflowed
  }

  /** The Redis client belongs to whoever opened it. */
  async close (): Promise<void> {}

  async #take (tenant: string, version: string, consumer: string, want: number, stuckMs: number, now: number): Promise<ClaimedDelivery[]> {
    const keys = webhookTenantKeys(tenant)
    const reply = await this.#commands.claim(packArgs(WEBHOOK_CLAIM_ARGS, { ...keys, group: GROUP, consumer, nowMs: String(now), max: want, stuckMs: String(stuckMs), cursor: this.#cursors.get(tenant) ?? '0-0' }))
    if (!Array.isArray(reply) || typeof reply[0] !== 'string') throw new Error(`unexpected reply from the webhook claim script: ${JSON.stringify(reply)}`)
    this.#cursors.set(tenant, reply[0])
    const waiting = Number(reply[1])
    const firstDue = reply[2] === '' ? null : Number(reply[2])
    if (waiting > 0) {
      this.#idle.delete(tenant)
    } else if (firstDue !== null) {
      this.#idle.set(tenant, { version, untilMs: firstDue })
    } else {
      this.#idle.delete(tenant)
      this.#cursors.delete(tenant)
      await this.#commands.unindex(packArgs(WEBHOOK_UNINDEX_ARGS, { index: INDEX, tenant, version }))
    }
    const claimed: ClaimedDelivery[] = []
    for (const entry of entries(reply.slice(3))) {
      const delivery = deliveryOf(entry)
      // An entry that is not a delivery (or not this tenant's) can never be sent: acknowledged and dropped.
      if (delivery === null || delivery.tenant !== tenant) await this.#commands.complete(packArgs(WEBHOOK_COMPLETE_ARGS, { stream: keys.stream, group: GROUP, entryId: entry[0], consumer }))
      else claimed.push({ entryId: entry[0], delivery })
    }
    return claimed
  }

  /** Replays one dead letter of `tenant`: 1 queued, 0 gone meanwhile, 2 the tenant's queue is full. */
  async #move (tenant: string, entry: StreamEntry): Promise<number> {
    const delivery = deliveryOf(entry)
    if (delivery === null) return 0
    const keys = webhookTenantKeys(tenant)
    const outcome = Number(await this.#commands.replay(packArgs(WEBHOOK_REPLAY_ARGS, { ...keys, letterId: entry[0], group: GROUP, cap: this.#perTenant, delivery: JSON.stringify(revived(delivery, this.#now())) })))
    if (outcome === 1) await this.#index(tenant, true, false)
    return outcome
  }

  async #index (tenant: string, work: boolean, dead: boolean): Promise<void> {
    await this.#commands.index(packArgs(WEBHOOK_INDEX_ARGS, { index: INDEX, version: VERSION, deadIndex: DEAD_INDEX, tenant, work, dead }))
  }
}
