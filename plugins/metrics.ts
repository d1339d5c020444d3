import fp from 'fastify-plugin'
import type { FastifyRequest } from 'fastify'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { createHash, timingSafeEqual } from 'node:crypto'
import { setImmediate, setTimeout as sleep } from 'node:timers/promises'
import type { Services, ServicesObservers } from '../lib/compose.js'
import { readManifest } from '../lib/manifest.js'
import { headerCount } from '../lib/net/http-headers.js'
import { usageReport, type UsageReport } from '../lib/quota/allowance.js'
import type { Backlog } from '../lib/state/webhook-queue.js'

/** Tenants whose allowance one turn of a scrape reads (see latestAllowances). */
const ALLOWANCE_READS_PER_TURN = 100

/**
 * After a render of the registry, the next waits this many times as long: scrapes then take
 * at most about a twentieth of the process's time however many arrive (with 2,000 tenants a
 * render is ~850 KB and takes 80 to 200 ms; 8 loops of scrapes rendering side by side took
 * the API's p50 from 5 to 361 ms), while a small registry, quick to render, waits little.
 */
const RENDER_PAUSE_FACTOR = 20
/** The longest pause between renders: a scrape waits at most this long for its render. */
const MAX_RENDER_PAUSE_MS = 1000

/**
 * One render at a time, shared by every scrape that arrives while it runs or while the next
 * one waits: a render starts only `pause(duration of the last)` after the last ended, and
 * each scrape gets the render in flight when it arrived or the next one, never an output kept
 * from before it arrived (a scrape after a reload or an event sees it).
 */
export function sharedRender (render: () => Promise<string>, pause: (renderMs: number) => number): () => Promise<string> {
  let next: Promise<string> | null = null
  let startAt = 0
  const run = async (): Promise<string> => {
    const wait = startAt - performance.now()
    if (wait > 0) await sleep(wait)
    const started = performance.now()
    try {
      return await render()
    } finally {
      const ended = performance.now()
      startAt = ended + pause(ended - started)
      next = null
    }
  }
  return async () => await (next ??= run())
}

export interface Metrics {
  readonly registry: Registry
  readonly dispatches: Counter<'tenant' | 'mode' | 'result'>
  readonly verifications: Counter<'tenant' | 'mode' | 'result'>
  readonly deliveryFailures: Counter<'kind'>
  readonly mailSent: Counter<'transport'>
  readonly mailFailovers: Counter<'from' | 'kind'>
  readonly mailCircuitSkips: Counter<'transport'>
  readonly sesFeedback: Counter<'outcome'>
  /** SES events of the tenants' live mail, by tenant: what their bounce and complaint rates are made of. */
  readonly sesEvents: Counter<'tenant' | 'event'>
  readonly reviewUses: Counter<'mode'>
  /** 1 while a tenant's live sending is paused for its bounce or complaint rate (lib/reputation/), as this instance last read it. */
  readonly tenantSendingPaused: Gauge<'tenant'>
  /** Sets the tenant's `email_otp_tenant_sending_paused`. */
  sendingPaused (tenant: string, paused: boolean): void
  readonly lockouts: Counter<'tenant' | 'mode'>
  readonly errors: Counter<'code'>
  readonly webhookAttempts: Counter<'outcome'>
  readonly webhookOverflow: Counter
  /** Time to hand one live message to its transport, by transport and result (`sent` or the failure kind). */
  readonly mailSendSeconds: Histogram<'transport' | 'result'>
  /**
   * Whether the request carries METRICS_TOKEN as its one `Authorization: Bearer` header:
   * what the public listener asks before it shows metrics or readiness details. Always false
   * when no token is configured.
   */
  presentsToken (request: FastifyRequest): boolean
  /** The registry in Prometheus's text format, rendered for every scrape on either listener through sharedRender. */
  render (): Promise<string>
  /**
   * The tenants whose counters of rare events that alerts count (live lockouts, permanent
   * bounces, complaints) are shown from zero before the first one, looked up at each scrape: a
   * rate over a series that appears at 1 would miss its first event. Counters of everyday
   * events get a tenant's series with its traffic, so an idle tenant costs a scrape little.
   */
  countTenants (ids: () => Iterable<string>): void
}

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Metrics
  }
}

const WEBHOOK_OUTCOMES = ['delivered', 'retry', 'dead', 'dropped'] as const

/**
 * Compared as SHA-256 digests: both sides are 32 bytes whatever was presented, so the
 * comparison is timingSafeEqual's, and neither a wrong byte nor a wrong length answers sooner.
 */
function digest (value: string): Buffer {
  return createHash('sha256').update(value).digest()
}

/**
 * Prometheus metrics: the registry, the service's counters and latency histogram. One
 * registry per app, so tests and several apps in one process never share counters. Where
 * they are served (routes/metrics.ts) is the app's and the server's choice.
 */
export default fp(async function metricsPlugin (fastify) {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry, prefix: 'email_otp_' })

  const requests = new Histogram({
    name: 'email_otp_http_request_duration_seconds',
    help: 'Request latency by route and status.',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry]
  })
  let tenantIds: () => Iterable<string> = () => []
  const sendingPaused = new Set<string>()
  const seeded = new WeakMap<Counter<string>, Set<string>>()
  /**
   * Every tenant's series of `counter`, one per combination of `values`, present from zero.
   * Each tenant once: a scrape then only looks for tenants new in the file.
   */
  const seed = <L extends string>(counter: Counter<L>, values: Partial<Record<L, readonly string[]>>): void => {
    let done = seeded.get(counter)
    if (done === undefined) seeded.set(counter, done = new Set())
    let combinations: Array<Partial<Record<L, string>>> | null = null
    for (const tenant of tenantIds()) {
      if (done.has(tenant)) continue
      done.add(tenant)
      combinations ??= Object.entries(values).reduce<Array<Partial<Record<L, string>>>>(
        (partial, [name, list]) => partial.flatMap((labels) => (list as readonly string[]).map((value) => ({ ...labels, [name]: value }))), [{}])
      for (const labels of combinations) counter.inc({ tenant, ...labels } as Partial<Record<L, string>>, 0)
    }
  }
  const token = fastify.config.metricsToken
  const expected = token === null ? null : digest(`Bearer ${token}`)
  const metrics: Metrics = {
    registry,
    dispatches: new Counter({
      name: 'email_otp_dispatches_total',
      help: 'Dispatch outcomes by tenant and mode: sent, delivery_failed.',
      labelNames: ['tenant', 'mode', 'result'] as const,
      registers: [registry]
    }),
    verifications: new Counter({
      name: 'email_otp_verifications_total',
      help: 'Verify outcomes by tenant and mode: verified, mismatch, malformed.',
      labelNames: ['tenant', 'mode', 'result'] as const,
      registers: [registry]
    }),
    lockouts: new Counter({
      name: 'email_otp_lockouts_total',
      help: 'Recipient mailboxes locked by a run of wrong guesses, by tenant and mode.',
      labelNames: ['tenant', 'mode'] as const,
      registers: [registry],
      collect () { seed(this, { mode: ['live'] }) }
    }),
    deliveryFailures: new Counter({ name: 'email_otp_delivery_failures_total', help: 'Mail that did not leave, by provider error kind.', labelNames: ['kind'] as const, registers: [registry] }),
    mailSent: new Counter({ name: 'email_otp_mail_sent_total', help: 'Messages accepted, by the provider that took them (sandbox: the sandbox inbox).', labelNames: ['transport'] as const, registers: [registry] }),
    mailFailovers: new Counter({ name: 'email_otp_mail_failovers_total', help: 'Sends that went on to the next provider of MAIL_TRANSPORT, by the provider that failed and how.', labelNames: ['from', 'kind'] as const, registers: [registry] }),
    mailCircuitSkips: new Counter({ name: 'email_otp_mail_circuit_skips_total', help: 'Sends that skipped a provider because its circuit was open.', labelNames: ['transport'] as const, registers: [registry] }),
    sesFeedback: new Counter({ name: 'email_otp_ses_feedback_total', help: 'Answers of POST /feedback/ses by outcome: handled, confirmed, duplicate, ignored, throttled, unavailable, the refusal code (SNS_SIGNATURE_INVALID…), or before the checks malformed (not an SNS envelope), PAYLOAD_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE.', labelNames: ['outcome'] as const, registers: [registry] }),
    sesEvents: new Counter({
      name: 'email_otp_ses_events_total',
      help: 'SES events of live mail by tenant: delivered, delayed, bounced_permanent, bounced_transient, complained.',
      labelNames: ['tenant', 'event'] as const,
      registers: [registry],
      collect () { seed(this, { event: ['bounced_permanent', 'complained'] }) }
    }),
    tenantSendingPaused: new Gauge({
      name: 'email_otp_tenant_sending_paused',
      help: '1 while a tenant\'s live sending is paused because its bounce or complaint rate reached REPUTATION_BOUNCE_RATE or REPUTATION_COMPLAINT_RATE (every instance reports the shared pause, read every few seconds), else 0.',
      labelNames: ['tenant'] as const,
      registers: [registry],
      // Every tenant of the file present from 0; a paused one's 1 was set when this instance read its pause.
      collect () { for (const tenant of tenantIds()) if (!sendingPaused.has(tenant)) this.set({ tenant }, 0) }
    }),
    reviewUses: new Counter({ name: 'email_otp_review_uses_total', help: 'Dispatches to a tenant\'s review addresses (no mail, no charge).', labelNames: ['mode'] as const, registers: [registry] }),
    errors: new Counter({ name: 'email_otp_errors_total', help: 'Error answers by code (rate limits, blocks, quota, auth, validation…).', labelNames: ['code'] as const, registers: [registry] }),
    webhookAttempts: new Counter({
      name: 'email_otp_webhook_attempts_total',
      help: 'Webhook delivery attempts by outcome: delivered, retry, dead (given up), dropped (endpoint removed).',
      labelNames: ['outcome'] as const,
      registers: [registry]
    }),
    webhookOverflow: new Counter({
      name: 'email_otp_webhook_overflow_total',
      help: 'Webhook deliveries moved to their tenant\'s dead letters because the tenant\'s queue was full (WEBHOOK_MAX_QUEUED_PER_TENANT).',
      registers: [registry]
    }),
    mailSendSeconds: new Histogram({
      name: 'email_otp_mail_send_duration_seconds',
      help: 'Time to hand one live message to the mail transport, by transport and result (sent, or timeout, connection, throttled, rejected, unknown).',
      labelNames: ['transport', 'result'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry]
    }),
    presentsToken (request) {
      return expected !== null && headerCount(request.raw.rawHeaders, 'authorization') === 1 &&
        timingSafeEqual(digest(request.headers.authorization ?? ''), expected)
    },
    countTenants (ids) { tenantIds = ids },
    sendingPaused (tenant, paused) {
      if (paused) sendingPaused.add(tenant)
      else sendingPaused.delete(tenant)
      metrics.tenantSendingPaused.set({ tenant }, paused ? 1 : 0)
    },
    render: sharedRender(async () => await registry.metrics(), (renderMs) => Math.min(MAX_RENDER_PAUSE_MS, renderMs * RENDER_PAUSE_FACTOR))
  }
  for (const transport of fastify.config.mailTransports) metrics.mailCircuitSkips.inc({ transport }, 0)
  for (const outcome of WEBHOOK_OUTCOMES) metrics.webhookAttempts.inc({ outcome }, 0)
  // The value is always 1: the labels are the information (`version`, `node_version`), joined
  // onto other series by dashboards to tell which build each instance runs.
  new Gauge({
    name: 'email_otp_build_info',
    help: 'The running build: its version and Node.js version. Always 1.',
    labelNames: ['version', 'node_version'] as const,
    registers: [registry]
  }).set({ version: readManifest().version, node_version: process.versions.node }, 1)
  fastify.decorate('metrics', metrics)
  fastify.addHook('onResponse', (request, reply, done) => {
    // The route pattern, never the raw URL: label values must stay few.
    const route = request.routeOptions.url ?? 'unmatched'
    requests.observe({ method: request.method, route, status: String(reply.statusCode) }, reply.elapsedTime / 1000)
    done()
  })
}, { name: 'metrics', dependencies: ['config'], fastify: '5.x' })

/** What the services count, as this app's metrics count it. */
export function servicesObservers (metrics: Metrics): ServicesObservers {
  return {
    otp: {
      dispatched (key, result) {
        if ('sentBy' in result) {
          metrics.dispatches.inc({ tenant: key.tenant.id, mode: key.mode, result: 'sent' })
          metrics.mailSent.inc({ transport: result.sentBy })
          return
        }
        metrics.dispatches.inc({ tenant: key.tenant.id, mode: key.mode, result: 'delivery_failed' })
        metrics.deliveryFailures.inc({ kind: result.deliveryFailed })
      },
      checked (key, result) {
        metrics.verifications.inc({ tenant: key.tenant.id, mode: key.mode, result })
      },
      locked (key) {
        metrics.lockouts.inc({ tenant: key.tenant.id, mode: key.mode })
      },
      reviewed (key) {
        metrics.reviewUses.inc({ mode: key.mode })
      }
    },
    mailFailover: {
      failedOver (from, kind) { metrics.mailFailovers.inc({ from, kind }) },
      skipped (transport) { metrics.mailCircuitSkips.inc({ transport }) }
    },
    sendingPaused (tenant, paused) { metrics.sendingPaused(tenant, paused) },
    mailSend (transport, seconds, result) {
      metrics.mailSendSeconds.observe({ transport, result }, seconds)
    },
    feedback (tenant, type, bounceType) {
      metrics.sesEvents.inc({ tenant, event: type === 'bounced' ? `bounced_${bounceType ?? 'transient'}` : type })
    },
    webhookAttempted (outcome) { metrics.webhookAttempts.inc({ outcome }) },
    webhookOverflowed (count) { metrics.webhookOverflow.inc(count) }
  }
}

/**
 * The services' state as gauges: the Redis connection, the block lists, the tenants file, the
 * webhook queues. Gauges read their value at scrape time, so the request path pays nothing for them.
 */
export function observeServices (metrics: Metrics, services: Pick<Services, 'redis' | 'state' | 'blocklists' | 'tenants' | 'webhookBacklogs'>): void {
  const { registry } = metrics
  const { redis, state, blocklists, tenants } = services
  metrics.countTenants(() => tenants.current.tenants.keys())
  if (redis !== null) {
    registry.registerMetric(new Gauge({
      name: 'email_otp_redis_memory_used_ratio',
      help: 'used_memory over maxmemory of the fullest Redis primary (1 and above: Redis refuses writes, every dispatch and verify answers 503); absent when no primary has a maxmemory or none answered.',
      registers: [],
      async collect () {
        this.reset()
        const primaries = 'nodes' in redis ? redis.nodes('master') : [redis]
        const infos = await Promise.allSettled(primaries.map(async (primary) => await primary.info('memory')))
        let fullest: number | null = null
        for (const info of infos) {
          if (info.status === 'rejected') continue
          const used = Number(/^used_memory:(\d+)/m.exec(info.value)?.[1] ?? 0)
          const limit = Number(/^maxmemory:(\d+)/m.exec(info.value)?.[1] ?? 0)
          if (limit > 0) fullest = Math.max(fullest ?? 0, used / limit)
        }
        if (fullest !== null) this.set(fullest)
      }
    }))
    registry.registerMetric(new Gauge({
      name: 'email_otp_redis_up',
      help: '1 when the Redis connection is ready; absent on the in-memory default.',
      registers: [],
      collect () { this.set(redis.status === 'ready' ? 1 : 0) }
    }))
    registry.registerMetric(new Counter({
      name: 'email_otp_redis_writes_unacknowledged_total',
      help: 'Writes of a dispatch, verify, redemption, suppression or unlock that fewer than REDIS_REPLICA_ACKS replicas acknowledged in time: each answered 503, undone where it could be.',
      registers: [],
      collect () {
        this.reset()
        this.inc(state.unacknowledgedWrites())
      }
    }))
  }
  registry.registerMetric(new Counter({
    name: 'email_otp_verification_log_dropped_total',
    help: 'Verification story events lost: past the in-process queue waiting for the next write, or in a Redis write that failed (the requests that made them answered all the same).',
    registers: [],
    collect () {
      this.reset()
      this.inc(state.verificationLog.dropped())
    }
  }))
  registry.registerMetric(new Counter({
    name: 'email_otp_insights_dropped_total',
    help: 'Refusals lost to GET /insights: past the in-process tallies waiting for the next write, or in a Redis write that failed (not tried again).',
    registers: [],
    collect () {
      this.reset()
      this.inc(state.insights.dropped())
    }
  }))
  registry.registerMetric(new Gauge({
    name: 'email_otp_blocklist_age_seconds',
    help: 'Age of each network block list since its last good load.',
    labelNames: ['list'] as const,
    registers: [],
    collect () {
      for (const list of blocklists.status()) if (list.ageSeconds !== null) this.set({ list: list.name }, list.ageSeconds)
    }
  }))
  registry.registerMetric(new Gauge({
    name: 'email_otp_blocklist_entries',
    help: 'Entries in each network block list.',
    labelNames: ['list'] as const,
    registers: [],
    collect () {
      for (const list of blocklists.status()) this.set({ list: list.name }, list.entries)
    }
  }))

  registry.registerMetric(new Gauge({
    name: 'email_otp_tenants_file_info',
    help: 'The tenants file in force: its version (first 16 hex digits of its SHA-256) as a label, value 1.',
    labelNames: ['version'] as const,
    registers: [],
    collect () {
      this.reset()
      const { version } = tenants.status()
      if (version !== null) this.set({ version }, 1)
    }
  }))
  registry.registerMetric(new Gauge({
    name: 'email_otp_tenants_file_last_reload_success',
    help: '1 when the last load of the tenants file (at start, on a watched change or SIGHUP) succeeded, 0 when a reload failed and the previous tenants stayed in force.',
    registers: [],
    collect () {
      this.set(tenants.status().lastReloadOk ? 1 : 0)
    }
  }))
  registry.registerMetric(new Gauge({
    name: 'email_otp_tenants_refused',
    help: 'Tenants the tenants file in force refuses (their entry breaks a rule), value 1 each: serving="previous" keeps its last good configuration, serving="none" answers 503 TENANT_MISCONFIGURED to its keys.',
    labelNames: ['tenant', 'serving'] as const,
    registers: [],
    collect () {
      this.reset()
      for (const refused of tenants.current.refused.values()) this.set({ tenant: refused.id, serving: refused.serving }, 1)
    }
  }))
  registry.registerMetric(new Counter({
    name: 'email_otp_tenants_file_reloads_total',
    help: 'Reloads of the tenants file since start, by result (ok, failed).',
    labelNames: ['result'] as const,
    registers: [],
    collect () {
      const { reloads } = tenants.status()
      this.reset()
      this.inc({ result: 'ok' }, reloads.ok)
      this.inc({ result: 'failed' }, reloads.failed)
    }
  }))

  // Read at scrape time, per tenant of the tenants file: the quota store is shared by every
  // instance, so each reports the same figures. Read ALLOWANCE_READS_PER_TURN tenants at a
  // time, a turn of the event loop between them, so that a scrape with thousands of tenants
  // does not hold every request behind it; a tenant whose read fails keeps its last figures
  // (one failed read emptied every tenant's, and the near-allowance alert flapped).
  const lastAllowances = new Map<string, UsageReport>()
  let allowances: Promise<Array<[string, UsageReport]>> | null = null
  const readAllowances = async (): Promise<Array<[string, UsageReport]>> => {
    const now = Date.now()
    const current = [...tenants.current.tenants.values()]
    const read: Array<[string, UsageReport]> = []
    for (let start = 0; start < current.length; start += ALLOWANCE_READS_PER_TURN) {
      if (start > 0) await setImmediate()
      const batch = await Promise.all(current.slice(start, start + ALLOWANCE_READS_PER_TURN).map(async (tenant) =>
        await usageReport(state.quota, tenant, 'live', now).then((report) => report, () => lastAllowances.get(tenant.id))))
      batch.forEach((report, index) => {
        const id = current[start + index]?.id
        if (id !== undefined && report !== undefined) read.push([id, report])
      })
    }
    lastAllowances.clear()
    for (const [id, report] of read) lastAllowances.set(id, report)
    return read
  }
  const latestAllowances = async (): Promise<Array<[string, UsageReport]>> => {
    allowances ??= readAllowances().finally(() => { allowances = null })
    return await allowances
  }
  registry.registerMetric(new Gauge({
    name: 'email_otp_allowance_used',
    help: 'Live dispatches charged to each tenant\'s allowance in its current window.',
    labelNames: ['tenant'] as const,
    registers: [],
    async collect () {
      this.reset()
      for (const [tenant, report] of await latestAllowances()) this.set({ tenant }, report.used)
    }
  }))
  registry.registerMetric(new Gauge({
    name: 'email_otp_allowance_limit',
    help: 'Each tenant\'s live allowance per window (its tier\'s).',
    labelNames: ['tenant'] as const,
    registers: [],
    async collect () {
      this.reset()
      for (const [tenant, report] of await latestAllowances()) this.set({ tenant }, report.limit)
    }
  }))

  // Read at scrape time, per tenant of the tenants file. A Redis that does not answer leaves
  // them out of that scrape; email_otp_redis_up says why.
  let scraped: Promise<Array<[string, Backlog]>> | null = null
  /** One read for both gauges of a scrape. */
  const latest = async (): Promise<Array<[string, Backlog]>> => {
    scraped ??= services.webhookBacklogs().finally(() => { scraped = null })
    return await scraped.catch(() => [])
  }
  registry.registerMetric(new Gauge({
    name: 'email_otp_webhook_queue_depth',
    help: 'Webhook deliveries queued per tenant: waiting, in flight or due for a retry.',
    labelNames: ['tenant'] as const,
    registers: [],
    async collect () {
      this.reset()
      for (const [tenant, backlog] of await latest()) this.set({ tenant }, backlog.depth)
    }
  }))
  registry.registerMetric(new Gauge({
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
}
