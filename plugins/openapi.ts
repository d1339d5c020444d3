import fp from 'fastify-plugin'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'

/** The OpenAPI document is generated from the route schemas; nothing is written by hand. */
export default fp(async function openapiPlugin (fastify) {
  await fastify.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'email-otp',
        version: '1.2.0',
        description: 'Proves that a person controls an email address: dispatch sends a 6-digit code, verify checks a guess once. ' +
          'Every error answers `{ success: false, message, code }` with a stable `code`.'
      },
      components: {
        securitySchemes: {
          bearerAuth: {
            type: 'http',
            scheme: 'bearer',
            description: 'An API key: `sk_live_…`/`sk_test_…` (secret, server side) or `rk_live_…`/`rk_test_…` (restricted, browser, checked against its Origin allow-list). `test` keys are sandbox keys.'
          }
        }
      }
    }
  })
  await fastify.register(swaggerUi, { routePrefix: '/docs', staticCSP: true })
  fastify.get('/openapi.json', { schema: { hide: true } }, async () => fastify.swagger())
}, { name: 'openapi', fastify: '5.x' })
