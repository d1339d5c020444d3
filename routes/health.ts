import type { FastifyInstance } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perSource } from '../plugins/external/rate-limit.js'
import { LiveReply, ReadyReply } from '../schemas/health.js'

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
      summary: 'Liveness: the process answers',
      tags: ['operations'],
      response: { 200: LiveReply }
    }
  }, async () => ({ ok: true as const }))

  fastify.get('/readyz', {
    // Each probe pings the stores: strangers are held to the public routes' limit.
    config: { cors: false, rateLimit: perSource(service.config.routeLimits.public) },
    schema: {
      summary: 'Readiness: the token store and the mailer are usable',
      description: 'Answers only `{ ready }` (200 or 503) unless the caller presents METRICS_TOKEN as a bearer token.',
      tags: ['operations'],
      response: { 200: ReadyReply, 503: ReadyReply }
    }
  }, async (request, reply) => {
    const { backend, mailer, blocklists, metrics } = service
    const [tokenStoreOk, mailerOk] = await Promise.all([backend.ready(), mailer.ready()])
    const ready = tokenStoreOk && mailerOk
    reply.code(ready ? 200 : 503).header('cache-control', 'no-store')
    if (options.details !== 'everyone' && !metrics.presentsToken(request)) return { ready }
    return {
      ready,
      checks: {
        tokenStore: { ok: tokenStoreOk, kind: backend.kind },
        mailer: { ok: mailerOk, kind: mailer.transport }
      },
      blocklists: blocklists.status()
    }
  })
  // No CORS preflight is granted either (see routes/metrics.ts).
  fastify.options('/readyz', { schema: { hide: true }, config: { cors: false } }, (_request, reply) => { reply.callNotFound() })
}

export default healthRoutes
