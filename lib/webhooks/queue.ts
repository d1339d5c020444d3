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
}

/** A delivery one consumer holds until it settles it (complete, retry or bury). */
export interface ClaimedDelivery {
  entryId: string
  delivery: Delivery
}

export interface DeadLetter {
  id: string
  /** When it was buried, epoch ms. */
  deadAtMs: number
  delivery: Delivery
}

/** Queue once per key: the key is remembered `ttlMs` (a quota threshold, once per window). */
export interface OnceKey {
  key: string
  ttlMs: number
}

/**
 * The durable queue of webhook deliveries (a Redis stream with a consumer group, or memory on
 * the embedded default). Any number of consumers, in any number of processes, share it: a
 * claimed delivery belongs to one consumer until it settles it, or until it has held it
 * longer than `stuckMs` (its process died), when another consumer may take it over. A consumer
 * that lost a delivery that way cannot settle it any more. Both implementations pass
 * test/lib/webhooks/queue.test.ts.
 */
export interface WebhookQueue {
  /** Queues the deliveries of one event, all or none; with `once`, only the first time for its key. */
  enqueue (deliveries: readonly Delivery[], once?: OnceKey): Promise<boolean>
  /**
   * Up to `max` deliveries for `consumer`: due retries are moved to the queue first, then
   * deliveries held by a consumer for longer than `stuckMs` are taken over, then new ones.
   */
  claim (consumer: string, max: number, stuckMs: number): Promise<ClaimedDelivery[]>
  /** Delivered, or not to be delivered any more: forgotten. */
  complete (consumer: string, claimed: ClaimedDelivery): Promise<void>
  /** To be attempted again at `dueMs`, as `delivery` says (attempt count, last error). */
  retry (consumer: string, claimed: ClaimedDelivery, delivery: Delivery, dueMs: number): Promise<void>
  /** Given up: moved to the dead letters (the oldest go past DEAD_LETTER_CAP). */
  bury (consumer: string, claimed: ClaimedDelivery, delivery: Delivery): Promise<void>
  /** The dead letters, newest first. */
  deadLetters (limit: number): Promise<DeadLetter[]>
  /**
   * Queues dead letters again as new deliveries (same webhook-id, attempts and retry period
   * anew) and removes them from the dead letters; all of them when `ids` is null. Returns
   * how many were queued.
   */
  replay (ids: readonly string[] | null): Promise<number>
  close (): Promise<void>
}

/** Dead letters kept; past this the oldest are dropped. */
export const DEAD_LETTER_CAP = 10_000

/** A dead letter queued again: a new retry period, no attempt counted, no stale error. */
export function revived (delivery: Delivery, nowMs: number): Delivery {
  return { messageId: delivery.messageId, tenant: delivery.tenant, url: delivery.url, type: delivery.type, body: delivery.body, createdAtMs: nowMs, attempts: 0 }
}

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
  return strings && numbers && (entry.lastError === undefined || typeof entry.lastError === 'string') ? value as Delivery : null
}
