import fp from 'fastify-plugin'
import { Counter, Gauge } from 'prom-client'
import { IpRangeSet } from '../lib/net/ip-ranges.js'
import type { TenantRegistry } from '../lib/tenants/registry.js'
import { AddressPolicy } from '../lib/webhooks/address-policy.js'
import { EventSink, OverflowReporter } from '../lib/webhooks/events.js'
import { sendWebhook } from '../lib/webhooks/sender.js'
import type { Backlog } from '../lib/state/webhook-queue.js'
import { WebhookWorker } from '../lib/webhooks/worker.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Reports events to the tenants' webhook endpoints (lib/webhooks/events.ts). */
    webhooks: EventSink
  }
}

/** How often each instance looks for deliveries another instance queued or a retry that fell due. */
const POLL_MS = 1000
/** Attempts in flight per process, all tenants together (each tenant at most WEBHOOK_MAX_IN_FLIGHT_PER_TENANT of them). */
const MAX_IN_FLIGHT = 64
/** Past an attempt's timeout by this much, a held delivery is taken to be lost with its process. */
const STUCK_MARGIN_MS = 30_000

const hasEndpoints = new WeakMap<TenantRegistry, boolean>()

/**
 * Signed webhooks (Standard Webhooks): the event sink the request path emits to, the durable
 * queue (one per tenant: Redis streams when Redis is configured, memory otherwise) and this
 * process's delivery worker, started once the app is ready and stopped, its attempts settled,
 * on close.
 */
export default fp(async function webhooksPlugin (fastify) {
  const { config, backend, tenants } = fastify
  const queue = backend.webhookQueue
  const policy = new AddressPolicy({
    allowLoopback: config.webhooks.allowHttpLoopback,
    allowedNetworks: config.webhooks.allowedNetworks.length === 0 ? null : IpRangeSet.fromEntries(config.webhooks.allowedNetworks).set
  })
  const attempts = new Counter({
    name: 'email_otp_webhook_attempts_total',
    help: 'Webhook delivery attempts by outcome: delivered, retry, dead (given up), dropped (endpoint removed).',
    labelNames: ['outcome'] as const,
    registers: [fastify.metrics.registry]
  })
  const overflowCount = new Counter({
    name: 'email_otp_webhook_overflow_total',
    help: 'Webhook deliveries moved to their tenant\'s dead letters because the tenant\'s queue was full (WEBHOOK_MAX_QUEUED_PER_TENANT).',
    registers: [fastify.metrics.registry]
  })
  // Read at scrape time, per tenant of the tenants file. A Redis that does not answer leaves
  // them out of that scrape; email_otp_redis_up says why.
  const backlogs = async (): Promise<Array<[string, Backlog]>> => await Promise.all(
    [...tenants.current.tenants.keys()].map(async (tenant): Promise<[string, Backlog]> => [tenant, await queue.backlog(tenant)])
  )
  let scraped: Promise<Array<[string, Backlog]>> | null = null
  /** One read for both gauges of a scrape. */
  const latest = async (): Promise<Array<[string, Backlog]>> => {
    scraped ??= backlogs().finally(() => { scraped = null })
    return await scraped.catch(() => [])
  }
  fastify.metrics.registry.registerMetric(new Gauge({
    name: 'email_otp_webhook_queue_depth',
    help: 'Webhook deliveries queued per tenant: waiting, in flight or due for a retry.',
    labelNames: ['tenant'] as const,
    registers: [],
    async collect () {
      this.reset()
      for (const [tenant, backlog] of await latest()) this.set({ tenant }, backlog.depth)
    }
  }))
  fastify.metrics.registry.registerMetric(new Gauge({
    name: 'email_otp_webhook_queue_oldest_age_seconds',
    help: 'Age of the longest-waiting queued webhook delivery per tenant, since its event (0 when none waits).',
    labelNames: ['tenant'] as const,
    registers: [],
    async collect () {
      this.reset()
      const now = Date.now()
      for (const [tenant, backlog] of await latest()) this.set({ tenant }, backlog.oldestCreatedAtMs === null ? 0 : Math.max(0, now - backlog.oldestCreatedAtMs) / 1000)
    }
  }))

  const log = fastify.log.child({ component: 'webhooks' })
  const overflow = new OverflowReporter(log, (count) => { overflowCount.inc(count) })
  const worker = new WebhookWorker({
    queue,
    endpoint: (tenantId, url) => tenants.current.tenants.get(tenantId)?.webhooks.find((endpoint) => endpoint.url === url) ?? null,
    active () {
      const registry = tenants.current
      let active = hasEndpoints.get(registry)
      if (active === undefined) {
        active = [...registry.tenants.values()].some((tenant) => tenant.webhooks.length > 0)
        hasEndpoints.set(registry, active)
      }
      return active
    },
    send: async (endpoint, delivery, signal) => await sendWebhook(endpoint, delivery, { policy, timeoutMs: config.webhooks.timeoutMs, userAgent: 'email-otp-webhooks' }, signal),
    schedule: config.webhooks.retry,
    perEndpoint: config.webhooks.concurrencyPerEndpoint,
    perTenant: config.webhooks.maxInFlightPerTenant,
    maxInFlight: MAX_IN_FLIGHT,
    pollMs: Math.min(POLL_MS, config.webhooks.retry.baseMs),
    stuckMs: config.webhooks.timeoutMs + STUCK_MARGIN_MS,
    log,
    attempted: (outcome) => { attempts.inc({ outcome }) },
    overflowed: overflow.report
  })
  if (backend.kind === 'memory') {
    log.info('webhook queue in memory: deliveries waiting or dead are lost when the process stops (set REDIS_URL for a durable queue)')
  }
  fastify.decorate('webhooks', new EventSink(queue, { log, queued: () => { worker.wake() }, overflowed: overflow.report }))
  fastify.addHook('onReady', async () => { worker.start() })
  // Closed before the backend its queue lives in (onClose hooks run in reverse order).
  fastify.addHook('onClose', async () => { await worker.close() })
}, { name: 'webhooks', dependencies: ['config', 'backend', 'tenants', 'metrics'], fastify: '5.x' })
