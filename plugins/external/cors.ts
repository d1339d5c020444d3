import cors from '@fastify/cors'
import fp from 'fastify-plugin'
import { parseOrigin } from '../../lib/tenants/origins.js'
import { responseHeaderNames } from '../../schemas/headers.js'

/**
 * @fastify/cors. Preflights are answered for any well-formed origin (browsers send them
 * without the key); the key's allow-list is enforced on the real request, where the key is
 * known (plugins/auth.ts).
 */
export default fp(async function corsPlugin (fastify) {
  await fastify.register(cors, {
    origin: (origin, callback) => { callback(null, origin !== undefined && parseOrigin(origin) !== null) },
    methods: ['GET', 'POST'],
    allowedHeaders: ['Authorization', 'Content-Type', 'Idempotency-Key', 'Accept-Language', 'Captcha-Token'],
    // Every header the OpenAPI document says an answer carries is readable by the page.
    exposedHeaders: responseHeaderNames,
    maxAge: 600,
    // Strict mode answers an OPTIONS with an Origin but no Access-Control-Request-Method with
    // its own text/plain 400; it is answered as a preflight instead.
    strictPreflight: false
  })
}, { name: 'cors', fastify: '5.x' })
