import type { FastifyInstance } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { connectionErrors, errorResponses } from '../schemas/errors.js'
import { LiveReply, ReadyReply } from '../schemas/health.js'
import { ref } from '../schemas/ref.js'
import { problemPointer } from '../lib/tenants/registry.js'
import type { StoresReadiness } from '../lib/state/index.js'

export interface HealthRoutesOptions {
  /** The service whose readiness is reported: the internal listener reports on the public app. */
  service?: FastifyInstance
  /**
   * Who sees which stores and lists the service runs, their sizes, ages and errors: holders of
   * METRICS_TOKEN on the public listener, everyone on the internal one. Others learn only
   * ready or not.
   */
  details: 'token' | 'everyone'
}

interface StoreChecks { tokenStore: StoresReadiness, mailerOk: boolean }

const healthRoutes: FastifyPluginAsyncTypebox<HealthRoutesOptions> = async function healthRoutes (fastify, options) {
  const service = options.service ?? fastify
  // Probes are never throttled (kubelets of many nodes, a mesh's health checks, from addresses
  // that share per-source buckets across pods on Redis). What a flood of them could cost is
  // the stores' ping, so requests that arrive while one check is running share its answer:
  // at most one check is in flight per listener, whatever the request rate.
  let running: Promise<StoreChecks> | null = null
  const check = async (): Promise<StoreChecks> => {
    running ??= Promise.all([service.state.ready(), service.mailer.ready()])
      .then(([tokenStore, mailerOk]) => ({ tokenStore, mailerOk }))
      .finally(() => { running = null })
    return await running
  }

  fastify.get('/healthz', {
    schema: {
      operationId: 'getLiveness',
      summary: 'Liveness: the process answers',
      description: 'For a liveness probe: 200 as long as the process can answer HTTP. It checks nothing else (no store, no mailer), so that an outage of a dependency never gets healthy instances restarted; readiness (`/readyz`) is the probe that takes an instance out of service.',
      tags: ['operations'],
      security: [],
      response: {
        200: ref(LiveReply, { description: 'The process is up. Nothing else is checked: an outage of Redis or of the mailer does not fail it.' }),
        ...errorResponses(connectionErrors)
      }
    }
  }, async () => ({ ok: true as const }))

  fastify.get('/readyz', {
    config: { cors: false },
    schema: {
      operationId: 'getReadiness',
      summary: 'Readiness: the token store answers and the mailer is configured',
      description: 'Answers only `{ ready }` (200 or 503) unless the caller presents METRICS_TOKEN as a bearer token. Never rate-limited: requests that arrive while a check runs share its answer. From SIGTERM on, 503 for SHUTDOWN_DRAIN_MS while every other route keeps serving.',
      tags: ['operations'],
      security: [],
      response: {
        200: ref(ReadyReply, { description: 'Ready: the token store answers (a Redis PING when Redis is configured, the server a primary of the kind the settings name, and Redis\'s maxmemory-policy is noeviction) and the mailer is configured and open. The mail provider itself is not probed.' }),
        503: ref(ReadyReply, { description: 'Not ready: `checks` tells which dependency is not usable, `draining` that the instance is shutting down, `blocklists` which list has not loaded yet. Take the instance out of rotation; do not restart it for this.' }),
        ...errorResponses(connectionErrors)
      }
    }
  }, async (request, reply) => {
    const { state, mailer, blocklists, metrics, drain, tenants } = service
    const details = options.details === 'everyone' || metrics.presentsToken(request)
    reply.header('cache-control', 'no-store')
    // A draining instance is not ready whatever its stores say: no need to wait for them.
    if (drain.draining && !details) return await reply.code(503).send({ ready: false })
    const { tokenStore, mailerOk } = await check()
    const ready = tokenStore.ok && mailerOk && blocklists.loaded() && !drain.draining
    reply.code(ready ? 200 : 503)
    if (!details) return { ready }
    return {
      ready,
      draining: drain.draining,
      checks: {
        tokenStore: {
          ok: tokenStore.ok,
          kind: state.kind,
          ...(tokenStore.reason === null ? {} : { reason: tokenStore.reason }),
          ...(tokenStore.replicas === null ? {} : { replicas: tokenStore.replicas }),
          ...(tokenStore.warnings.length === 0 ? {} : { warnings: tokenStore.warnings })
        },
        mailer: { ok: mailerOk, kind: mailer.transport }
      },
      blocklists: blocklists.status(),
      tenants: {
        version: tenants.current.version,
        refused: [...tenants.current.refused.values()].map((refused) => ({ tenant: refused.id, serving: refused.serving, problems: refused.problems.map(problemPointer) }))
      }
    }
  })
  // No CORS preflight is granted either (see routes/metrics.ts).
  fastify.options('/readyz', { schema: { hide: true }, config: { cors: false } }, (_request, reply) => { reply.callNotFound() })
}

export default healthRoutes
