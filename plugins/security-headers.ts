import fp from 'fastify-plugin'
import helmet from 'helmet'

/**
 * Security headers on every answer. The helmet middleware is built once here: the Fastify
 * wrapper (@fastify/helmet) rebuilds it for every request, which measured as 40% of the
 * throughput of a small route (see bench/README.md).
 */
export default fp(async function securityHeadersPlugin (fastify) {
  const applyHeaders = helmet({
    // A JSON API loads nothing; /docs sets its own policy for the Swagger UI assets.
    contentSecurityPolicy: { directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } }
  })
  fastify.addHook('onRequest', (request, reply, done) => {
    applyHeaders(request.raw, reply.raw, (error?: unknown) => { done(error as Error | undefined) })
  })
}, { name: 'security-headers', fastify: '5.x' })
