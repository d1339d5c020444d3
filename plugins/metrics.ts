import fp from 'fastify-plugin'
import type { FastifyRequest } from 'fastify'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { createHash, timingSafeEqual } from 'node:crypto'
import { headerCount } from '../lib/net/http-headers.js'

export interface Metrics {
  readonly registry: Registry
  readonly dispatches: Counter<'mode' | 'result'>
  readonly verifications: Counter<'mode' | 'result'>
  readonly deliveryFailures: Counter<'kind'>
  readonly lockouts: Counter<'mode'>
  readonly errors: Counter<'code'>
  /**
   * Whether the request carries METRICS_TOKEN as its one `Authorization: Bearer` header:
   * what the public listener asks before it shows metrics or readiness details. Always false
   * when no token is configured.
   */
  presentsToken (request: FastifyRequest): boolean
}

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Metrics
  }
}

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
  const token = fastify.config.metricsToken
  const expected = token === null ? null : digest(`Bearer ${token}`)
  const metrics: Metrics = {
    registry,
    dispatches: new Counter({ name: 'email_otp_dispatches_total', help: 'Dispatch outcomes: sent, delivery_failed.', labelNames: ['mode', 'result'] as const, registers: [registry] }),
    verifications: new Counter({ name: 'email_otp_verifications_total', help: 'Verify outcomes: verified, mismatch, malformed.', labelNames: ['mode', 'result'] as const, registers: [registry] }),
    lockouts: new Counter({ name: 'email_otp_lockouts_total', help: 'Recipient mailboxes locked by a run of wrong guesses.', labelNames: ['mode'] as const, registers: [registry] }),
    deliveryFailures: new Counter({ name: 'email_otp_delivery_failures_total', help: 'Mail that did not leave, by provider error kind.', labelNames: ['kind'] as const, registers: [registry] }),
    errors: new Counter({ name: 'email_otp_errors_total', help: 'Error answers by code (rate limits, blocks, quota, auth, validation…).', labelNames: ['code'] as const, registers: [registry] }),
    presentsToken (request) {
      return expected !== null && headerCount(request.raw.rawHeaders, 'authorization') === 1 &&
        timingSafeEqual(digest(request.headers.authorization ?? ''), expected)
    }
  }
  // Gauges read their value at scrape time, so the request path pays nothing for them.
  const { redis } = fastify
  if (redis !== null) {
    registry.registerMetric(new Gauge({
      name: 'email_otp_redis_up',
      help: '1 when the Redis connection is ready; absent on the in-memory default.',
      registers: [],
      collect () { this.set(redis.status === 'ready' ? 1 : 0) }
    }))
  }
  registry.registerMetric(new Gauge({
    name: 'email_otp_blocklist_age_seconds',
    help: 'Age of each network block list since its last good load.',
    labelNames: ['list'] as const,
    registers: [],
    collect () {
      for (const list of fastify.blocklists.status()) if (list.ageSeconds !== null) this.set({ list: list.name }, list.ageSeconds)
    }
  }))
  registry.registerMetric(new Gauge({
    name: 'email_otp_blocklist_entries',
    help: 'Entries in each network block list.',
    labelNames: ['list'] as const,
    registers: [],
    collect () {
      for (const list of fastify.blocklists.status()) this.set({ list: list.name }, list.entries)
    }
  }))

  const { tenants } = fastify
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

  fastify.decorate('metrics', metrics)
  fastify.addHook('onResponse', (request, reply, done) => {
    // The route pattern, never the raw URL: label values must stay few.
    const route = request.routeOptions.url ?? 'unmatched'
    requests.observe({ method: request.method, route, status: String(reply.statusCode) }, reply.elapsedTime / 1000)
    done()
  })
}, { name: 'metrics', dependencies: ['config', 'redis', 'blocklists', 'tenants'], fastify: '5.x' })
