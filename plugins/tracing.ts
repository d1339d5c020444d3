import { FastifyOtelInstrumentation } from '@fastify/otel'
import fp from 'fastify-plugin'
import type { FastifyPluginAsync } from 'fastify'
import { traceIdOf } from '../lib/telemetry/correlation.js'

/**
 * The route instrumentation of @fastify/otel, loaded only when tracing is on (server.ts). A
 * request's span continues an incoming W3C `traceparent` and is named by its route template
 * (`POST /otp/request`), never the raw URL; its `url.path` drops the query string, which may
 * carry an address. Exceptions are not recorded: an error's message may quote input.
 */
export function routeInstrumentation (): { instrumentation: FastifyOtelInstrumentation, plugin: FastifyPluginAsync } {
  const instrumentation = new FastifyOtelInstrumentation({
    recordExceptions: false,
    // One span per request and one for its handler; a span per hook would cost more than the
    // request itself.
    instrumentHooks: false,
    requestHook: (span, request) => {
      span.updateName(`${request.method} ${request.routeOptions.url ?? 'unmatched'}`)
      span.setAttribute('url.path', request.url.split('?')[0] ?? '/')
    }
  })
  const routes = instrumentation.plugin()
  const plugin = fp(async function tracingPlugin (fastify) {
    await fastify.register(routes)
    // After the instrumentation's own onRequest hook has opened the request's span: the rest
    // of the request's lines carry its span id, and the id of the trace it started when no
    // traceparent came in (app.ts binds an incoming one's from the first line).
    fastify.addHook('onRequest', (request, reply, done) => {
      const span = request.opentelemetry().span?.spanContext()
      if (span !== undefined) {
        const bindings = traceIdOf(request.headers.traceparent) === span.traceId ? { spanId: span.spanId } : { traceId: span.traceId, spanId: span.spanId }
        request.log = request.log.child(bindings)
        reply.log = request.log
      }
      done()
    })
  }, { name: 'tracing', fastify: '5.x' })
  return { instrumentation, plugin }
}
