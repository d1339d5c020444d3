import { randomUUID } from 'node:crypto'
import type { Writable } from 'node:stream'
import type { FastifyInstance, FastifyReply, FastifyServerOptions } from 'fastify'
import cors from '@fastify/cors'
import fp from 'fastify-plugin'
import type { Config } from './lib/config.js'
import { errorCatalog } from './schemas/error-catalog.js'
import { parseOrigin } from './lib/tenants/registry.js'
import abuseGuardPlugin from './plugins/abuse-guard.js'
import admissionPlugin from './plugins/admission.js'
import authPlugin from './plugins/auth.js'
import blocklistsPlugin from './plugins/blocklists.js'
import configPlugin from './plugins/config.js'
import errorsPlugin from './plugins/errors.js'
import mailerPlugin from './plugins/mailer.js'
import metricsPlugin from './plugins/metrics.js'
import openapiPlugin from './plugins/openapi.js'
import receiptsPlugin from './plugins/receipts.js'
import redisPlugin from './plugins/redis.js'
import securityHeadersPlugin from './plugins/security-headers.js'
import idempotencyPlugin from './plugins/idempotency.js'
import tenantQuotaPlugin from './plugins/tenant-quota.js'
import tenantsPlugin from './plugins/tenants.js'
import tokenStorePlugin from './plugins/token-store.js'
import webhooksPlugin from './plugins/webhooks.js'
import healthRoutes from './routes/health.js'
import otpRoutes from './routes/otp.js'
import receiptRoutes, { jwksRoutes } from './routes/receipts.js'
import sandboxRoutes from './routes/sandbox.js'
import usageRoutes from './routes/usage.js'

export interface AppOptions {
  config: Config
  /** Where the log mail transport prints (stdout by default). */
  mailLog?: Writable
}

/**
 * Fastify's constructor options for a given configuration. server.ts and the tests build
 * the instance with the same options.
 */
export function serverOptions (config: Config, logStream?: Writable): FastifyServerOptions {
  return {
    logger: {
      level: config.logLevel,
      ...(logStream === undefined ? {} : { stream: logStream }),
      // Belt and braces: no serializer below emits these, and nothing may ever log them.
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.body', 'email', 'code', 'userGuess'], censor: '[redacted]' },
      serializers: {
        // The default request serializer logs the whole URL; query strings may carry addresses.
        req: (request: { method: string, url: string, ip?: string, id?: string }) => ({
          method: request.method,
          url: request.url.split('?')[0],
          remoteAddress: request.ip
        })
      }
    },
    // Errors Fastify raises before routing (a malformed percent-encoding in the path) never
    // reach setErrorHandler: answer them in the contract's shape here.
    frameworkErrors: (_error, _request, reply: FastifyReply) => {
      void reply.code(400).send({ success: false, message: errorCatalog.INVALID_URL.message, code: 'INVALID_URL' })
    },
    bodyLimit: config.bodyLimitBytes,
    trustProxy: config.trustProxy.length > 0 ? config.trustProxy : false,
    // Request ids are ours; a client-chosen id would let callers forge log correlation.
    requestIdHeader: false,
    genReqId: () => randomUUID(),
    ajv: {
      customOptions: {
        // Unknown fields are an error, not something to drop silently; types are not coerced.
        removeAdditional: false,
        coerceTypes: false,
        allErrors: false
      }
    }
  }
}

async function app (fastify: FastifyInstance, options: AppOptions): Promise<void> {
  await fastify.register(configPlugin, { config: options.config })
  await fastify.register(securityHeadersPlugin)
  await fastify.register(cors, {
    // Preflights are answered for any well-formed origin; the key's allow-list is enforced on
    // the real request, where the key is known.
    origin: (origin, callback) => { callback(null, origin !== undefined && parseOrigin(origin) !== null) },
    methods: ['GET', 'POST'],
    allowedHeaders: ['Authorization', 'Content-Type', 'Idempotency-Key', 'Accept-Language'],
    exposedHeaders: ['Retry-After', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset', 'Quota-Limit', 'Quota-Remaining', 'Quota-Reset', 'X-Request-Id'],
    maxAge: 600
  })
  // Synchronous hooks on the hot path: an async one costs a promise and a microtask per request.
  fastify.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    done()
  })
  await fastify.register(redisPlugin)
  await fastify.register(tokenStorePlugin)
  await fastify.register(tenantsPlugin)
  await fastify.register(tenantQuotaPlugin)
  await fastify.register(blocklistsPlugin)
  await fastify.register(metricsPlugin)
  await fastify.register(errorsPlugin)
  await fastify.register(mailerPlugin, options.mailLog === undefined ? {} : { mailLog: options.mailLog })
  await fastify.register(openapiPlugin)
  await fastify.register(receiptsPlugin)
  await fastify.register(webhooksPlugin)

  await fastify.register(healthRoutes)
  await fastify.register(jwksRoutes)
  await fastify.register(async function apiScope (api) {
    // JSON only: anything else answers 415 before its body is read.
    api.removeContentTypeParser('text/plain')
    api.addHook('onRequest', (_request, reply, done) => {
      reply.header('cache-control', 'no-store')
      done()
    })
    await api.register(abuseGuardPlugin)
    await api.register(admissionPlugin)
    await api.register(authPlugin)
    await api.register(idempotencyPlugin)
    await api.register(otpRoutes)
    await api.register(usageRoutes)
    await api.register(receiptRoutes)
    await api.register(sandboxRoutes)
  })
}

// Not encapsulated, so that server.ts and the tests reach the decorators (tenants, redis…).
export default fp(app, { name: 'email-otp', fastify: '5.x' })
