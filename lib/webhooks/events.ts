import { randomBytes } from 'node:crypto'
import type { Logger } from 'pino'
import type { WebhookEventData, WebhookEventType } from '../../schemas/webhooks.js'
import type { KeyMode } from '../keys/api-keys.js'
import type { Tenant } from '../tenants/tenant.js'
import { currentTraceparent } from '../telemetry/spans.js'
import type { Delivery, OnceKey, WebhookQueue } from '../state/webhook-queue.js'

/** `msg_` and 128 random bits: the webhook-id receivers deduplicate on. */
export function generateMessageId (): string {
  return `msg_${randomBytes(16).toString('base64url')}`
}

/** The quota thresholds (percent of the allowance) that send `quota.threshold`. */
export const QUOTA_THRESHOLDS = [80, 100] as const

/**
 * The thresholds the unit that made the count `used` reached: exactly one dispatch per window
 * takes the count to a given value, so only it reports the threshold (a refund that takes the
 * count back under it and a later dispatch that reaches it again are told apart by the
 * once-per-window key of the event).
 */
export function reachedQuotaThresholds (used: number, limit: number): Array<typeof QUOTA_THRESHOLDS[number]> {
  if (limit <= 0) return []
  return QUOTA_THRESHOLDS.filter((percent) => used === Math.ceil(limit * percent / 100))
}

export interface EventSinkOptions {
  log: Pick<Logger, 'error'>
  /** Called once an event is in the queue (the local worker wakes up for it). */
  queued?: () => void
  /** Called when queueing an event pushed some of its tenant's waiting deliveries into the tenant's dead letters. */
  overflowed?: (tenant: string, count: number) => void
  now?: () => number
}

/**
 * Where the service reports what happened. `emit` returns at once and never fails the
 * request: the event is written to the durable queue in the background and delivered by the
 * worker, never on the request path. A tenant without an endpoint for the type costs nothing.
 */
export class EventSink {
  readonly #queue: WebhookQueue
  readonly #options: EventSinkOptions

  constructor (queue: WebhookQueue, options: EventSinkOptions) {
    this.#queue = queue
    this.#options = options
  }

  emit<T extends WebhookEventType> (tenant: Tenant, mode: KeyMode, type: T, data: WebhookEventData[T], once?: OnceKey): void {
    if (tenant.webhooks.length === 0) return
    const endpoints = tenant.webhooks.filter((endpoint) => endpoint.events.has(type))
    if (endpoints.length === 0) return
    const nowMs = (this.#options.now ?? Date.now)()
    const body = JSON.stringify({ type, timestamp: new Date(nowMs).toISOString(), data: { tenant: tenant.id, mode, ...data } })
    const messageId = generateMessageId()
    const traceparent = currentTraceparent()
    const deliveries: Delivery[] = endpoints.map((endpoint) => ({ messageId, tenant: tenant.id, url: endpoint.url, type, body, createdAtMs: nowMs, attempts: 0, ...(traceparent === undefined ? {} : { traceparent }) }))
    this.#queue.enqueue(deliveries, once).then(({ queued, overflowed }) => {
      if (overflowed > 0) this.#options.overflowed?.(tenant.id, overflowed)
      if (queued) this.#options.queued?.()
    }, (error: unknown) => {
      // The request that caused the event has been answered; the event alone is lost.
      this.#options.log.error({ err: error, tenant: tenant.id, mode, type, messageId }, 'webhook event could not be queued and is lost')
    })
  }
}

/** An overflowing tenant queue is logged at most this often per tenant: once per burst. */
export const OVERFLOW_LOG_INTERVAL_MS = 60_000

/**
 * Reports deliveries pushed out of a full tenant queue: every one counted (`counted`), and one
 * log line per tenant and burst, naming how many went since the last line, so that a tenant
 * flooding its own queue cannot flood the log.
 */
export class OverflowReporter {
  readonly #log: Pick<Logger, 'warn'>
  readonly #counted: (count: number) => void
  readonly #now: () => number
  /** Per tenant: when its last line was written, and what overflowed since. Bounded by the tenants. */
  readonly #bursts = new Map<string, { loggedAtMs: number, since: number }>()

  constructor (log: Pick<Logger, 'warn'>, counted: (count: number) => void, now: () => number = Date.now) {
    this.#log = log
    this.#counted = counted
    this.#now = now
  }

  readonly report = (tenant: string, count: number): void => {
    this.#counted(count)
    const now = this.#now()
    const burst = this.#bursts.get(tenant)
    if (burst !== undefined && now - burst.loggedAtMs < OVERFLOW_LOG_INTERVAL_MS) {
      burst.since += count
      return
    }
    this.#bursts.set(tenant, { loggedAtMs: now, since: 0 })
    this.#log.warn({ tenant, overflowed: count + (burst?.since ?? 0) }, 'webhook queue of a tenant is full (WEBHOOK_MAX_QUEUED_PER_TENANT): its longest-waiting deliveries were moved to its dead letters')
  }
}
