import fp from 'fastify-plugin'
import helmet from 'helmet'
import type { IncomingMessage, ServerResponse } from 'node:http'

type Middleware = (request: IncomingMessage, response: ServerResponse, next: (error?: unknown) => void) => void

/**
 * The headers a helmet middleware sets, recorded by running it once against a stand-in
 * response. Valid only for a configuration that reads nothing from the request (no CSP nonce
 * functions), which is the case here; it answers synchronously.
 */
function recordHeaders (middleware: Middleware): Record<string, string> {
  const headers: Record<string, string> = {}
  let failure: unknown = null
  let finished = false
  const recorder = {
    setHeader (name: string, value: string | number | readonly string[]) { headers[name.toLowerCase()] = String(value) },
    removeHeader () {}
  }
  middleware({} as IncomingMessage, recorder as unknown as ServerResponse, (error?: unknown) => {
    finished = true
    failure = error ?? null
  })
  if (!finished || failure !== null) throw new Error('helmet did not set its headers synchronously', { cause: failure })
  return headers
}

/**
 * Security headers on every answer, from helmet. Its headers here are the same for every
 * request, so it runs once at start-up and each answer gets the recorded set: running the
 * middleware per request (a dozen setHeader calls, each validated) cost 6% of a verify, and
 * the Fastify wrapper (@fastify/helmet), which also rebuilds the middleware each time, 40% of
 * a small route's throughput (see bench/README.md).
 */
export default fp(async function helmetPlugin (fastify) {
  const headers = recordHeaders(helmet({
    // A JSON API loads nothing; /docs sets its own policy for the Swagger UI assets.
    contentSecurityPolicy: { directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } }
  }))
  fastify.addHook('onRequest', (_request, reply, done) => {
    reply.headers(headers)
    done()
  })
}, { name: 'helmet', fastify: '5.x' })
