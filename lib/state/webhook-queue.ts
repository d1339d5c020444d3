import type { WebhookEventType } from '../../schemas/webhooks.js'

/** One event for one endpoint, as it waits in the queue between attempts. */
export interface Delivery {
  /** `webhook-id`: one per event, the same for each of its endpoints and every attempt. */
  messageId: string
  tenant: string
  /** The endpoint, as the tenants file names it (its identity); its secret is read per attempt. */
  url: string
  type: WebhookEventType
  /** The exact JSON body, signed as is on every attempt. */
  body: string
  /** When the event was queued (or replayed), epoch ms: retries end WEBHOOK_RETRY_FOR after it. */
  createdAtMs: number
  /** Attempts made so far. */
  attempts: number
  /** Why the last attempt failed. */
  lastError?: string
  /** The W3C trace context of the request that caused the event, when it was traced: attempts link to it. */
  traceparent?: string
}

export interface Backlog {
  depth: number
  oldestCreatedAtMs: number | null
}

/** A delivery one consumer holds until it settles it (complete, retry or bury). */
export interface ClaimedDelivery {
  entryId: string
  delivery: Delivery
}

/**
 * Why a delivery is dead: its attempts failed for WEBHOOK_RETRY_FOR (`failed`), or its tenant's
 * queue was full and it was among the tenant's longest waiting (`overflow`).
 */
export type DeadReason = 'failed' | 'overflow'

export interface DeadLetter {
  /** `<tenant>/<id within the tenant's dead letters>`: unique across tenants. */
  id: string
  /** When it was buried, epoch ms. */
  deadAtMs: number
  reason: DeadReason
  delivery: Delivery
}

/** Queue once per key: the key is remembered `ttlMs` (a quota threshold, once per window). */
export interface OnceKey {
  key: string
  ttlMs: number
}

export interface EnqueueResult {
  /** False when the `once` key had been seen (nothing was queued). */
  queued: boolean
  /** Waiting deliveries of the tenant moved to its dead letters to make room for these. */
  overflowed: number
}

export interface ReplayResult {
  /** Dead letters queued again. */
  replayed: number
  /** Ids asked for that name no dead letter (never did, or replayed or dropped since). */
  unknown: string[]
  /** Dead letters left where they are because their tenant's queue is at its cap. */
  full: number
}

/** Attempts a consumer may start now for a tenant (its per-tenant share of the delivery slots). */
export type TenantRoom = (tenant: string) => number

export interface WebhookQueueLimits {
  /**
   * Deliveries one tenant may have queued (waiting, held or due for a retry), and dead letters
   * it keeps. Past it, enqueue moves the tenant's longest-waiting deliveries to its dead letters
   * (its retries first, those due last first, then its oldest never attempted), and a new dead
   * letter pushes out the tenant's oldest one. Never another tenant's.
   */
  perTenant: number
}

/**
 * The durable queue of webhook deliveries, one queue per tenant (Redis streams with a consumer
 * group, or memory on the embedded default), so that one tenant's backlog never sits in front
 * of another's deliveries and never takes another's room. Any number of consumers, in any
 * number of processes, share it: a claimed delivery belongs to one consumer until it settles
 * it, or until it has held it longer than `stuckMs` (its process died), when another consumer
 * may take it over. A consumer that lost a delivery that way cannot settle it any more. Both
 * implementations pass test/lib/state/webhook-queue.test.ts.
 */
export interface WebhookQueue {
  /**
   * Queues the deliveries of one event (one tenant's), all or none; with `once`, only the first
   * time for its key. Never fails for want of room: the tenant's own longest-waiting deliveries
   * make room (see WebhookQueueLimits).
   */
  enqueue (deliveries: readonly Delivery[], once?: OnceKey): Promise<EnqueueResult>
  /**
   * Up to `max` deliveries for `consumer`, shared out among the tenants with work in turn, at
   * most `room(tenant)` of each tenant's: due retries are moved to their tenant's queue first,
   * then deliveries held by a consumer for longer than `stuckMs` are taken over, then new ones.
   */
  claim (consumer: string, max: number, stuckMs: number, room?: TenantRoom): Promise<ClaimedDelivery[]>
  /** Delivered, or not to be delivered any more: forgotten. */
  complete (consumer: string, claimed: ClaimedDelivery): Promise<void>
  /** To be attempted again at `dueMs`, as `delivery` says (attempt count, last error). */
  retry (consumer: string, claimed: ClaimedDelivery, delivery: Delivery, dueMs: number): Promise<void>
  /** Given up: moved to its tenant's dead letters (past the cap, the tenant's oldest are dropped). */
  bury (consumer: string, claimed: ClaimedDelivery, delivery: Delivery): Promise<void>
  /** The dead letters of one tenant, or of every tenant (null), newest first. */
  deadLetters (tenant: string | null, limit: number): Promise<DeadLetter[]>
  /**
   * Queues dead letters again as new deliveries (same webhook-id, attempts and retry period
   * anew) and removes them from the dead letters: those named by `ids`, or all of `tenant`'s
   * (every tenant's when null) when `ids` is null. A tenant's letters are replayed only while
   * its queue is below its cap.
   */
  replay (tenant: string | null, ids: readonly string[] | null): Promise<ReplayResult>
  /**
   * What an operator watches (/metrics): the deliveries of `tenant` queued (`depth`: waiting,
   * held or due for a retry), and
   * when the longest-waiting of them was queued (its `createdAtMs`; null when none is).
   */
  backlog (tenant: string): Promise<Backlog>
  /**
   * Where the queue has an earlier layout to drain (Redis: the one shared stream of earlier
   * versions), moves a batch of it into the tenants' queues; the count per tenant of deliveries
   * the move pushed out of a full queue. Consumers call it before they claim.
   */
  migrate? (consumer: string, stuckMs: number): Promise<Map<string, number>>
  close (): Promise<void>
}

/** Deliveries a tenant may have queued, and dead letters it keeps, unless configured. */
export const DEFAULT_PER_TENANT_CAP = 10_000

/** A dead letter queued again: a new retry period, no attempt counted, no stale error. */
export function revived (delivery: Delivery, nowMs: number): Delivery {
  return { messageId: delivery.messageId, tenant: delivery.tenant, url: delivery.url, type: delivery.type, body: delivery.body, createdAtMs: nowMs, attempts: 0, ...(delivery.traceparent === undefined ? {} : { traceparent: delivery.traceparent }) }
}

/** The tenant of one event's deliveries; they must all be the same tenant's. */
export function tenantOf (deliveries: readonly Delivery[]): string | null {
  const [first] = deliveries
  if (first === undefined) return null
  if (deliveries.some((delivery) => delivery.tenant !== first.tenant)) throw new RangeError('the deliveries of one enqueue must be one tenant\'s')
  return first.tenant
}

/** A dead letter's id: the tenant, then the letter's id among the tenant's own. */
export function deadLetterId (tenant: string, localId: string): string {
  return `${tenant}/${localId}`
}

/** The tenant and local id of a dead letter id, or null for one that cannot be. */
export function parseDeadLetterId (id: string): { tenant: string, localId: string } | null {
  const slash = id.indexOf('/')
  if (slash < 1 || slash === id.length - 1) return null
  return { tenant: id.slice(0, slash), localId: id.slice(slash + 1) }
}

/**
 * Shares `max` claims out among `tenants` in turn: each round offers every tenant still in it
 * an equal part of what is left (at most its `room`), and a tenant that took less than offered
 * has nothing more to give and leaves. `take` claims up to `want` of one tenant's deliveries.
 */
export async function claimFairly (
  tenants: readonly string[],
  max: number,
  room: TenantRoom,
  take: (tenant: string, want: number) => Promise<ClaimedDelivery[]>
): Promise<ClaimedDelivery[]> {
  const claimed: ClaimedDelivery[] = []
  const taken = new Map<string, number>()
  let candidates = [...tenants]
  let left = max
  while (left > 0 && candidates.length > 0) {
    const share = Math.ceil(left / candidates.length)
    const offers: Array<[tenant: string, want: number]> = []
    let offered = 0
    for (const tenant of candidates) {
      const want = Math.min(share, left - offered, room(tenant) - (taken.get(tenant) ?? 0))
      if (want <= 0) continue
      offers.push([tenant, want])
      offered += want
    }
    if (offers.length === 0) break
    const results = await Promise.all(offers.map(async ([tenant, want]) => await take(tenant, want)))
    candidates = []
    offers.forEach(([tenant, want], index) => {
      const got = results[index] ?? []
      claimed.push(...got)
      left -= got.length
      taken.set(tenant, (taken.get(tenant) ?? 0) + got.length)
      if (got.length === want) candidates.push(tenant)
    })
  }
  return claimed
}

const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/

/** Reads a queued delivery back, refusing anything that is not one. */
export function parseDelivery (text: string): Delivery | null {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return null
  }
  if (typeof value !== 'object' || value === null) return null
  const entry = value as Record<string, unknown>
  const strings = ['messageId', 'tenant', 'url', 'type', 'body'].every((name) => typeof entry[name] === 'string')
  const numbers = ['createdAtMs', 'attempts'].every((name) => typeof entry[name] === 'number')
  const traceparent = entry.traceparent === undefined || (typeof entry.traceparent === 'string' && TRACEPARENT.test(entry.traceparent))
  return strings && numbers && traceparent && (entry.lastError === undefined || typeof entry.lastError === 'string') ? value as Delivery : null
}
