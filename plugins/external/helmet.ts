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
 * The headers of a JSON answer (OWASP's REST Security Cheat Sheet): never stored by a cache,
 * never sniffed into another type, never rendered in a frame, HTTPS only once a browser has
 * seen it over HTTPS, readable from other origins only through CORS. helmet's page headers
 * (opener policy, agent clustering, DNS prefetch, download and Flash policies) concern
 * documents a browser renders, which a JSON answer is not; they cost ~400 bytes on every answer.
 */
export const API_HEADERS: Readonly<Record<string, string>> = {
  'cache-control': 'no-store',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'cross-origin-resource-policy': 'same-origin',
  'referrer-policy': 'no-referrer',
  'strict-transport-security': 'max-age=31536000; includeSubDomains',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY'
}

/** Where the browsable documentation is served: pages, so helmet's whole set. */
const DOCS_PREFIX = '/docs'

/**
 * Security headers on every answer: the API set above, and helmet's page set under /docs.
 * helmet's headers here are the same for every request, so it runs once at start-up and each
 * answer gets the recorded set: running the middleware per request (a dozen setHeader calls,
 * each validated) cost 6% of a verify, and the Fastify wrapper (@fastify/helmet), which also
 * rebuilds the middleware each time, 40% of a small route's throughput (see bench/README.md).
 * The route's URL decides (a 404 under /docs/ gets the API set: it is JSON); a route's own
 * `cache-control` (the key set's) replaces the default.
 */
export default fp(async function helmetPlugin (fastify) {
  const pageHeaders = recordHeaders(helmet({
    // The Swagger UI sets its own policy for its assets (plugins/openapi.ts).
    contentSecurityPolicy: { directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } }
  }))
  fastify.addHook('onRequest', (request, reply, done) => {
    reply.headers(request.routeOptions.url?.startsWith(DOCS_PREFIX) === true ? pageHeaders : API_HEADERS)
    done()
  })
}, { name: 'helmet', fastify: '5.x' })
