import type { Writable } from 'node:stream'
import type { Server } from 'node:http'
import type { FastifyHttpOptions, FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from './lib/config/types.js'
import { withStoreBudget } from './lib/store-errors.js'
import { requestIdFor, traceIdOf } from './lib/telemetry/correlation.js'
import { namedSchemas } from './schemas/components.js'
import { errorCatalog } from './schemas/error-catalog.js'
import abuseGuardPlugin from './plugins/abuse-guard.js'
import authPlugin from './plugins/auth.js'
import captchaPlugin from './plugins/captcha.js'
import clientAddressPlugin, { clientAddressOf, trustedProxies } from './plugins/client-address.js'
import configPlugin from './plugins/config.js'
import corsPlugin from './plugins/external/cors.js'
import helmetPlugin from './plugins/external/helmet.js'
import rateLimitPlugin from './plugins/external/rate-limit.js'
import connectionsPlugin from './plugins/connections.js'
import drainPlugin from './plugins/drain.js'
import errorsPlugin, { answerClientError, answerErrorsInContractShape, answerFrameworkError } from './plugins/errors.js'
import metricsPlugin from './plugins/metrics.js'
import openapiPlugin from './plugins/openapi.js'
import refusalPacingPlugin from './plugins/refusal-pacing.js'
import refusalsPlugin from './plugins/refusals.js'
import servicesPlugin from './plugins/services.js'
import tenantTurnsPlugin from './plugins/tenant-turns.js'
import idempotencyPlugin from './plugins/idempotency.js'
import workloadIdentityPlugin, { meshLogFields, meshSettings } from './plugins/workload-identity.js'
import healthRoutes from './routes/health.js'
import insightsRoutes from './routes/insights.js'
import feedbackRoutes from './routes/feedback.js'
import metricsRoutes from './routes/metrics.js'
import otpRoutes from './routes/otp.js'
import recipientRoutes from './routes/recipients.js'
import receiptRoutes, { jwksRoutes } from './routes/receipts.js'
import sandboxRoutes from './routes/sandbox.js'
import templateRoutes from './routes/templates.js'
import usageRoutes from './routes/usage.js'
import verificationRoutes from './routes/verifications.js'

export interface AppOptions {
  config: Config
  /** Where the log mail transport prints (stdout by default). */
  mailLog?: Writable
}

/**
 * A log field named `code` is the stable error code (`request rejected` lines, as in the
 * answer's body); an OTP code is never logged. Should one ever arrive under that name, the
 * redaction still hides anything that is not a catalogued error code.
 */
function redactUnlessErrorCode (value: unknown, path: string[]): unknown {
  return path.length === 1 && path[0] === 'code' && typeof value === 'string' && Object.hasOwn(errorCatalog, value) ? value : '[redacted]'
}

/**
 * Fastify's constructor options for a given configuration. server.ts and the tests build
 * the instance with the same options.
 */
export function serverOptions (config: Config, logStream?: Writable): FastifyHttpOptions<Server> {
  const proxies = trustedProxies(config.trustProxy)
  const mesh = meshSettings(config)
  return {
    // Each wait of start-up is bounded by its own setting (Redis's connect timeout, up to 20 s):
    // Fastify's 10 s default for a plugin would turn a slow but bounded start into a crash.
    pluginTimeout: 60_000,
    logger: {
      level: config.logLevel,
      ...(logStream === undefined ? {} : { stream: logStream }),
      // Belt and braces: no serializer below emits these, and nothing may ever log them.
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.body', 'email', 'code', 'userGuess', '*.userGuess'], censor: redactUnlessErrorCode },
      serializers: {
        // The default request serializer logs the whole URL; query strings may carry addresses.
        req: (request: FastifyRequest) => ({
          method: request.method,
          url: request.url.split('?')[0],
          // Logged before the onRequest hooks that resolve it, hence resolved here as well.
          ...((mesh === null ? null : meshLogFields(request, mesh)) ?? { remoteAddress: clientAddressOf(request, proxies) ?? request.ip })
        })
      }
    },
    frameworkErrors: answerFrameworkError,
    clientErrorHandler: answerClientError,
    bodyLimit: config.bodyLimitBytes,
    // Headers and body together must arrive within REQUEST_TIMEOUT_MS (node's requestTimeout
    // counts from the request's first byte until its body is complete; Fastify's default of 0
    // turns it off). Node checks the deadline every connectionsCheckingInterval (30 s by
    // default, and only settable when the server is created): a quarter of the timeout, at
    // most a second, closes a slow client within REQUEST_TIMEOUT_MS plus that interval.
    requestTimeout: config.requestTimeoutMs,
    http: {
      headersTimeout: config.requestTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, Math.ceil(config.requestTimeoutMs / 4))
    },
    keepAliveTimeout: config.keepAliveTimeoutMs,
    // The client address is ours (plugins/client-address.ts), from TRUST_PROXY: Fastify's own
    // trustProxy would hand out any X-Forwarded-For text as request.ip.
    trustProxy: false,
    // Request ids are ours, or the mesh sidecar's `x-request-id` when it comes from a proxy in
    // TRUST_PROXY: a caller's own choice would let it forge log correlation.
    requestIdHeader: false,
    genReqId: (raw) => requestIdFor(raw.headers['x-request-id'], raw.socket?.remoteAddress, proxies),
    // Every line of a request carries the trace id of an incoming `traceparent` (also with
    // tracing off), so lines match the sidecar's access log and the caller's trace. With
    // tracing on, plugins/tracing.ts adds the request's own span (and a new trace's id).
    childLoggerFactory: (logger, bindings, options, raw) => {
      const traceId = traceIdOf(raw.headers.traceparent)
      return logger.child(traceId === null ? bindings : { ...bindings, traceId }, options)
    },
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
  await fastify.register(connectionsPlugin, {
    maxPerSource: options.config.maxConnectionsPerSource,
    trustedProxies: trustedProxies(options.config.trustProxy),
    ipv6BucketPrefix: options.config.ipv6BucketPrefix,
    writeStallMs: options.config.requestTimeoutMs
  })
  await fastify.register(drainPlugin)
  await fastify.register(helmetPlugin)
  // Synchronous hooks on the hot path: an async one costs a promise and a microtask per request.
  // Every store call of the request shares one budget: a stalled Redis costs it one timeout.
  fastify.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    withStoreBudget(options.config.redis === null ? null : options.config.redisCommandTimeoutMs, done)
  })
  // Every hook after this one knows the client's address.
  await fastify.register(clientAddressPlugin)
  await fastify.register(metricsPlugin)
  await fastify.register(workloadIdentityPlugin)
  await fastify.register(servicesPlugin, options.mailLog === undefined ? {} : { mailLog: options.mailLog })
  await fastify.register(refusalPacingPlugin)
  await fastify.register(rateLimitPlugin)
  // Before any route: a route keeps the error handler in force when it is added.
  await fastify.register(errorsPlugin)
  await fastify.register(corsPlugin)
  await fastify.register(openapiPlugin)

  await fastify.register(healthRoutes, { details: 'token' })
  // Metrics are off the public listener unless METRICS_TOKEN guards them (METRICS_PORT serves
  // them on the internal listener, internalApp below).
  if (options.config.metricsToken !== null) await fastify.register(metricsRoutes, { requireToken: true })
  await fastify.register(jwksRoutes)
  await fastify.register(feedbackRoutes)
  await fastify.register(async function apiScope (api) {
    // JSON only: anything else answers 415 before its body is read.
    api.removeContentTypeParser('text/plain')
    api.addHook('onRequest', (_request, reply, done) => {
      reply.header('cache-control', 'no-store')
      done()
    })
    await api.register(abuseGuardPlugin)
    await api.register(authPlugin)
    await api.register(tenantTurnsPlugin)
    await api.register(refusalsPlugin)
    await api.register(idempotencyPlugin)
    await api.register(captchaPlugin)
    await api.register(otpRoutes)
    await api.register(usageRoutes)
    await api.register(verificationRoutes)
    await api.register(insightsRoutes)
    await api.register(recipientRoutes)
    await api.register(receiptRoutes)
    await api.register(sandboxRoutes)
    await api.register(templateRoutes)
  })
}

// Not encapsulated, so that server.ts and the tests reach the decorators (tenants, redis…).
export default fp(app, { name: 'email-otp', fastify: '5.x' })

export interface InternalAppOptions {
  /** The service (the app above) whose metrics and readiness this listener reports. */
  service: FastifyInstance
}

/**
 * The internal listener (METRICS_PORT on METRICS_HOST, 127.0.0.1 by default): /metrics,
 * /readyz with its details, and /healthz, without credentials and without CORS. Being able to
 * reach it is the credential, so it belongs on a private interface. server.ts runs it as a
 * Fastify instance of its own beside the service: nothing of the API is reachable through it.
 */
export async function internalApp (fastify: FastifyInstance, options: InternalAppOptions): Promise<void> {
  answerErrorsInContractShape(fastify)
  // The health routes answer the named schemas the public app's OpenAPI plugin registers.
  for (const schema of namedSchemas) fastify.addSchema(schema)
  await fastify.register(connectionsPlugin, { maxPerSource: 0, trustedProxies: null, ipv6BucketPrefix: 128, writeStallMs: options.service.config.requestTimeoutMs })
  await fastify.register(healthRoutes, { service: options.service, details: 'everyone' })
  await fastify.register(metricsRoutes, { service: options.service, requireToken: false })
}
