import type { FastifyInstance } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perSource } from '../plugins/external/rate-limit.js'
import { connectionErrors, errorResponses } from '../schemas/errors.js'
import { LiveReply, ReadyReply } from '../schemas/health.js'
import { ref } from '../schemas/ref.js'

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

const healthRoutes: FastifyPluginAsyncTypebox<HealthRoutesOptions> = async function healthRoutes (fastify, options) {
  const service = options.service ?? fastify

  fastify.get('/healthz', {
    schema: {
      operationId: 'getLiveness',
      summary: 'Liveness: the process answers',
      tags: ['operations'],
      security: [],
      response: {
        200: ref(LiveReply, { description: 'The process is up. Nothing else is checked: an outage of Redis or of the mailer does not fail it.' }),
        ...errorResponses(connectionErrors)
      }
    }
  }, async () => ({ ok: true as const }))

  fastify.get('/readyz', {
    // Each probe pings the stores: strangers are held to the public routes' limit.
    config: { cors: false, rateLimit: perSource(service.config.routeLimits.public) },
    schema: {
      operationId: 'getReadiness',
      summary: 'Readiness: the token store answers and the mailer is configured',
      description: 'Answers only `{ ready }` (200 or 503) unless the caller presents METRICS_TOKEN as a bearer token.',
      tags: ['operations'],
      security: [],
      response: {
        200: ref(ReadyReply, { description: 'Ready: the token store answers (a Redis PING when Redis is configured, and Redis\'s maxmemory-policy is noeviction) and the mailer is configured and open. The mail provider itself is not probed.' }),
        503: ref(ReadyReply, { description: 'Not ready: `checks` tells which dependency is not usable. Take the instance out of rotation; do not restart it for this.' }),
        ...errorResponses(connectionErrors)
      }
    }
  }, async (request, reply) => {
    const { backend, mailer, blocklists, metrics } = service
    const [tokenStore, mailerOk] = await Promise.all([backend.ready(), mailer.ready()])
    const ready = tokenStore.ok && mailerOk
    reply.code(ready ? 200 : 503).header('cache-control', 'no-store')
    if (options.details !== 'everyone' && !metrics.presentsToken(request)) return { ready }
    return {
      ready,
      checks: {
        tokenStore: { ok: tokenStore.ok, kind: backend.kind, ...(tokenStore.reason === null ? {} : { reason: tokenStore.reason }) },
        mailer: { ok: mailerOk, kind: mailer.transport }
      },
      blocklists: blocklists.status()
    }
  })
  // No CORS preflight is granted either (see routes/metrics.ts).
  fastify.options('/readyz', { schema: { hide: true }, config: { cors: false } }, (_request, reply) => { reply.callNotFound() })
}

export default healthRoutes
