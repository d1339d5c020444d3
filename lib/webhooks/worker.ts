import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import type { Logger } from 'pino'
import type { ClaimedDelivery, Delivery, WebhookQueue } from '../state/webhook-queue.js'
import type { TenantRegistry } from '../tenants/registry.js'
import type { WebhookEndpoint } from '../tenants/tenant.js'
import { givenUp, retryDelayMs, type RetrySchedule } from './retry.js'
import type { AttemptResult } from './sender.js'

export type AttemptOutcome = 'delivered' | 'retry' | 'dead' | 'dropped'

const hasEndpoints = new WeakMap<TenantRegistry, boolean>()

/** Whether any tenant of a tenants file has a webhook endpoint: worked out once per file in force. */
export function anyEndpoint (registry: TenantRegistry): boolean {
  let found = hasEndpoints.get(registry)
  if (found === undefined) {
    found = [...registry.tenants.values()].some((tenant) => tenant.webhooks.length > 0)
    hasEndpoints.set(registry, found)
  }
  return found
}

export interface WorkerOptions {
  queue: WebhookQueue
  /** The endpoint a delivery is for, as the tenants file names it now; null once it is gone. */
  endpoint (tenant: string, url: string): WebhookEndpoint | null
  /** False while no tenant has an endpoint: the worker then leaves the queue alone. */
  active (): boolean
  send (endpoint: WebhookEndpoint, delivery: Delivery, signal: AbortSignal): Promise<AttemptResult>
  schedule: RetrySchedule
  /** Attempts in flight per endpoint in this process. */
  perEndpoint: number
  /** Attempts in flight per tenant in this process: no tenant's endpoints hold more of the slots. */
  perTenant: number
  /** Attempts in flight in this process. */
  maxInFlight: number
  /** How often the shared queue is polled for work other instances queued. */
  pollMs: number
  /** A delivery held this long by a consumer is taken to be lost with its process, and taken over. */
  stuckMs: number
  log: Pick<Logger, 'info' | 'warn' | 'error'>
  /** After each settled attempt, for metrics. */
  attempted?: (outcome: AttemptOutcome) => void
  /** Deliveries of a tenant pushed out of its full queue into its dead letters (while draining an earlier layout). */
  overflowed?: (tenant: string, count: number) => void
  random?: () => number
}

/** A busy endpoint's delivery comes back after this (plus jitter), no attempt counted. */
const BUSY_DELAY_MS = 250

/**
 * Delivers queued webhooks. Each process runs one worker, a consumer of the shared queue:
 * it claims what it has room for, shared out among the tenants with work and at most
 * `perTenant` in flight per tenant (so endpoints that never answer hold at most that many of
 * the `maxInFlight` slots, whatever their tenant's backlog), attempts each delivery at most
 * `perEndpoint` at a time per endpoint, and settles it: delivered, retried later with
 * exponential backoff and jitter, or buried in the dead letters once WEBHOOK_RETRY_FOR has
 * passed. The worker never runs on a request: events reach it through the queue only.
 */
export class WebhookWorker {
  readonly consumer = `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`
  readonly #options: WorkerOptions
  readonly #perEndpoint = new Map<string, number>()
  readonly #perTenant = new Map<string, number>()
  readonly #running = new Set<Promise<void>>()
  readonly #abort = new AbortController()
  #inFlight = 0
  #timer: NodeJS.Timeout | null = null
  #timerDueMs = Infinity
  /** The claim under way, if any: one at a time. */
  #ticking: Promise<void> | null = null
  #again = false
  #closed = false
  #failing = false

  constructor (options: WorkerOptions) {
    this.#options = options
  }

  start (): void {
    this.wake()
  }

  /** Looks at the queue now (a local event was queued), or at `atMs` (a retry falls due). */
  wake (atMs = Date.now()): void {
    if (this.#closed) return
    if (this.#ticking !== null && atMs <= Date.now()) {
      this.#again = true
      return
    }
    if (this.#timer !== null && this.#timerDueMs <= atMs) return
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timerDueMs = atMs
    this.#timer = setTimeout(() => {
      this.#timer = null
      this.#timerDueMs = Infinity
      if (this.#ticking !== null) {
        this.#again = true
        return
      }
      this.#ticking = this.#tick().finally(() => { this.#ticking = null })
    }, Math.max(0, atMs - Date.now()))
    this.#timer.unref()
  }

  /**
   * Stops claiming, interrupts the attempts in flight (they go back to the queue, no attempt
   * counted) and waits until every claimed delivery is settled.
   */
  async close (): Promise<void> {
    this.#closed = true
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#abort.abort()
    await this.#ticking
    while (this.#running.size > 0) await Promise.allSettled([...this.#running])
  }

  async #tick (): Promise<void> {
    if (this.#closed) return
    this.#again = false
    let claimedAll = false
    try {
      const { queue, perTenant, stuckMs } = this.#options
      if (this.#options.active()) {
        if (queue.migrate !== undefined) {
          for (const [tenant, count] of await queue.migrate(this.consumer, stuckMs)) this.#options.overflowed?.(tenant, count)
        }
        const room = this.#options.maxInFlight - this.#inFlight
        if (room > 0) {
          const claimed = await queue.claim(this.consumer, room, stuckMs, (tenant) => perTenant - (this.#perTenant.get(tenant) ?? 0))
          for (const entry of claimed) this.#track(this.#handle(entry))
          claimedAll = claimed.length === room
        }
        if (this.#failing) this.#options.log.info('webhook queue reachable again')
        this.#failing = false
      }
    } catch (error) {
      if (!this.#failing) this.#options.log.error({ err: error }, 'webhook queue unavailable; retrying')
      this.#failing = true
    }
    if (this.#closed) return
    // More may be waiting when the batch was full; a slot freed by a settled attempt also wakes.
    // Scheduled on the next turn, once this claim no longer counts as under way.
    const again = this.#again || claimedAll
    setImmediate(() => { this.wake(again ? Date.now() : Date.now() + this.#options.pollMs) })
  }

  #track (work: Promise<void>): void {
    this.#running.add(work)
    void work.finally(() => { this.#running.delete(work) })
  }

  async #handle (claimed: ClaimedDelivery): Promise<void> {
    const { queue, log } = this.#options
    const { delivery } = claimed
    this.#inFlight++
    this.#perTenant.set(delivery.tenant, (this.#perTenant.get(delivery.tenant) ?? 0) + 1)
    let attempted = true
    try {
      const endpoint = this.#options.endpoint(delivery.tenant, delivery.url)
      if (endpoint === null || !endpoint.events.has(delivery.type)) {
        await queue.complete(this.consumer, claimed)
        log.warn({ tenant: delivery.tenant, url: delivery.url, type: delivery.type, messageId: delivery.messageId }, 'webhook dropped: the endpoint is no longer configured for this event')
        this.#options.attempted?.('dropped')
        return
      }
      const endpointKey = `${delivery.tenant} ${delivery.url}`
      const busy = this.#perEndpoint.get(endpointKey) ?? 0
      if (busy >= this.#options.perEndpoint) {
        const dueMs = Date.now() + BUSY_DELAY_MS + Math.round((this.#options.random ?? Math.random)() * BUSY_DELAY_MS)
        attempted = false
        await queue.retry(this.consumer, claimed, delivery, dueMs)
        this.wake(dueMs)
        return
      }
      this.#perEndpoint.set(endpointKey, busy + 1)
      let result: AttemptResult
      try {
        result = await this.#options.send(endpoint, delivery, this.#abort.signal)
      } finally {
        const left = (this.#perEndpoint.get(endpointKey) ?? 1) - 1
        if (left === 0) this.#perEndpoint.delete(endpointKey)
        else this.#perEndpoint.set(endpointKey, left)
      }
      await this.#settle(claimed, result)
    } catch (error) {
      // The delivery stays held by this consumer; another takes it over after stuckMs.
      log.error({ err: error, messageId: delivery.messageId }, 'webhook delivery could not be settled; it will be taken over')
    } finally {
      this.#inFlight--
      const left = (this.#perTenant.get(delivery.tenant) ?? 1) - 1
      if (left === 0) this.#perTenant.delete(delivery.tenant)
      else this.#perTenant.set(delivery.tenant, left)
      // A slot an attempt freed is claimed again at once. A delivery put back because its
      // endpoint was busy freed nothing: waking for it would claim the tenant's next deliveries
      // for the same busy endpoints, and put them back, in a loop.
      if (!this.#closed && attempted) this.wake()
    }
  }

  async #settle (claimed: ClaimedDelivery, result: AttemptResult): Promise<void> {
    const { queue, log, schedule } = this.#options
    const { delivery } = claimed
    const context = { tenant: delivery.tenant, url: delivery.url, type: delivery.type, messageId: delivery.messageId }
    if (result.ok) {
      await queue.complete(this.consumer, claimed)
      this.#options.attempted?.('delivered')
      return
    }
    if (this.#abort.signal.aborted) {
      // Cut short by shutdown: not the endpoint's failure, so not counted; due again at once.
      await queue.retry(this.consumer, claimed, delivery, Date.now())
      return
    }
    const failed: Delivery = { ...delivery, attempts: delivery.attempts + 1, lastError: result.error }
    const now = Date.now()
    if (givenUp(schedule, delivery.createdAtMs, now)) {
      await queue.bury(this.consumer, claimed, failed)
      log.warn({ ...context, attempts: failed.attempts, error: result.error }, 'webhook delivery given up: moved to the dead letters')
      this.#options.attempted?.('dead')
      return
    }
    const dueMs = now + retryDelayMs(schedule, failed.attempts, this.#options.random)
    await queue.retry(this.consumer, claimed, failed, dueMs)
    log.info({ ...context, attempts: failed.attempts, error: result.error, retryAt: new Date(dueMs).toISOString() }, 'webhook attempt failed; retrying')
    this.#options.attempted?.('retry')
    this.wake(dueMs)
  }
}
