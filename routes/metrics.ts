import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import { apiError } from '../lib/errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** `false` keeps @fastify/cors off a route (it reads this; its types do not declare it). */
    cors?: false
  }
}

export interface MetricsRoutesOptions {
  /** The service whose metrics are served: the internal listener serves the public app's. */
  service?: FastifyInstance
  /** The public listener asks for METRICS_TOKEN; the internal one is reached only from inside. */
  requireToken: boolean
}

/** GET /metrics in Prometheus' text format; never with CORS, never in the OpenAPI document. */
const metricsRoutes: FastifyPluginAsync<MetricsRoutesOptions> = async function metricsRoutes (fastify, options) {
  const { metrics } = options.service ?? fastify
  fastify.get('/metrics', { schema: { hide: true }, config: { cors: false } }, async (request, reply) => {
    if (options.requireToken && !metrics.presentsToken(request)) throw apiError('UNAUTHORIZED', undefined, { 'www-authenticate': 'Bearer realm="email-otp metrics"' })
    reply.header('cache-control', 'no-store')
    return await reply.type(metrics.registry.contentType).send(await metrics.render())
  })
  // Taken from CORS's catch-all OPTIONS route, so that no preflight is granted either: the
  // not-found handler answers it as any OPTIONS, 204 with Allow.
  fastify.options('/metrics', { schema: { hide: true }, config: { cors: false } }, (_request, reply) => { reply.callNotFound() })
}

export default metricsRoutes
