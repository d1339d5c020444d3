import type { Writable } from 'node:stream'
import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { State } from '../lib/state/index.js'
import { createServices } from '../lib/compose.js'
import { apiError } from '../lib/errors.js'
import type { SesFeedback } from '../lib/feedback/ses-feedback.js'
import type { Mailer } from '../lib/mail/delivery/mailer.js'
import type { TemplatePreviews } from '../lib/previews/template-previews.js'
import type { Blocklists } from '../lib/net/blocklist.js'
import type { Caller, OtpService } from '../lib/otp/service.js'
import type { UsageService } from '../lib/quota/usage.js'
import type { VerificationStories } from '../lib/otp/verification-story.js'
import type { InsightsReports } from '../lib/otp/insights.js'
import type { Receipts } from '../lib/receipts/receipts.js'
import type { RedisClient } from '../lib/state/index.js'
import type { SandboxMessages } from '../lib/sandbox/messages.js'
import type { TenantDirectory } from '../lib/tenants-file/directory.js'
import type { EventSink } from '../lib/webhooks/events.js'
import { observeServices, servicesObservers } from './metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The shared Redis connection, or null on the embedded (in-memory) default. */
    redis: RedisClient | null
    /** Every store: tokens, admission counters, quota, idempotency, sandbox inbox. */
    state: State
    tenants: TenantDirectory
    blocklists: Blocklists
    mailer: Mailer
    receipts: Receipts
    /** Reports events to the tenants' webhook endpoints (lib/webhooks/events.ts). */
    webhooks: EventSink
    otp: OtpService
    feedback: SesFeedback
    usage: UsageService
    /** Each verification's story, read for its tenant (GET /verifications/{requestId}). */
    verifications: VerificationStories
    /** Each tenant's funnel per hour or day (GET /insights). */
    insights: InsightsReports
    sandbox: SandboxMessages
    previews: TemplatePreviews
  }
}

export interface ServicesPluginOptions {
  /** Where the log transport prints messages (stdout unless a test captures it). */
  mailLog?: Writable
}

/**
 * The caller of an authenticated request, as the OTP service takes it. Routes of the API
 * scope run after the auth hook, which has set `request.auth` or answered 401, and after the
 * abuse guard, which has read End-User-IP.
 */
export function callerOf (request: FastifyRequest): Caller {
  if (request.auth === null) throw apiError('UNAUTHORIZED')
  return { key: request.auth, address: request.clientAddress, endUserAddress: request.endUserAddress, meshSource: request.meshSource, log: request.log }
}

/**
 * The service graph (lib/compose.ts createServices) as the routes and hooks reach it: one
 * decorator per part, counted in the app's metrics. The stores are checked (a Redis allowed to
 * evict keys is logged before the first probe) and the webhook worker started once the app is
 * ready; everything is closed on close, after the routes have stopped.
 */
export default fp<ServicesPluginOptions>(async function servicesPlugin (fastify, options) {
  const services = await createServices(fastify.config, {
    log: fastify.log,
    ...(options.mailLog === undefined ? {} : { mailLog: options.mailLog }),
    observers: servicesObservers(fastify.metrics)
  })
  fastify.addHook('onClose', async () => { await services.close() })
  // Typed explicitly: inferred through decorate's conditional type, the union collapses to Redis.
  fastify.decorate<RedisClient | null>('redis', services.redis)
  fastify.decorate('state', services.state)
  fastify.decorate('tenants', services.tenants)
  fastify.decorate('blocklists', services.blocklists)
  fastify.decorate('mailer', services.mailer)
  fastify.decorate('receipts', services.receipts)
  fastify.decorate('webhooks', services.webhooks)
  fastify.decorate('otp', services.otp)
  fastify.decorate('feedback', services.feedback)
  fastify.decorate('usage', services.usage)
  fastify.decorate('verifications', services.verifications)
  fastify.decorate('insights', services.insights)
  fastify.decorate('sandbox', services.sandbox)
  fastify.decorate('previews', services.previews)
  observeServices(fastify.metrics, services)
  fastify.addHook('onReady', async () => { await services.start() })
}, { name: 'services', dependencies: ['config', 'metrics'], fastify: '5.x' })
