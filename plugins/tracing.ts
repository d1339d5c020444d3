import { FastifyOtelInstrumentation } from '@fastify/otel'
import type { FastifyPluginCallback } from 'fastify'

/**
 * The route instrumentation of @fastify/otel, loaded only when tracing is on (server.ts). A
 * request's span continues an incoming W3C `traceparent` and is named by its route template
 * (`POST /v1/otp/dispatch`), never the raw URL; its `url.path` drops the query string, which
 * may carry an address. Exceptions are not recorded: an error's message may quote input.
 */
export function routeInstrumentation (): { instrumentation: FastifyOtelInstrumentation, plugin: FastifyPluginCallback } {
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
  return { instrumentation, plugin: instrumentation.plugin() }
}
