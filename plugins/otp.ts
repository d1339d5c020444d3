import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { admissionPolicy } from '../lib/admission/plan.js'
import { apiError } from '../lib/errors.js'
import { CodeSigner } from '../lib/otp/signer.js'
import { OtpService, type Caller } from '../lib/otp/service.js'

declare module 'fastify' {
  interface FastifyInstance {
    otp: OtpService
  }
}

/**
 * The caller of an authenticated request, as the OTP service takes it. Routes of the API
 * scope run after the auth hook, which has set `request.auth` or answered 401, and after the
 * abuse guard, which has read End-User-IP.
 */
export function callerOf (request: FastifyRequest): Caller {
  if (request.auth === null) throw apiError('UNAUTHORIZED')
  return { key: request.auth, address: request.clientAddress, endUserAddress: request.endUserAddress, workload: request.workload, log: request.log }
}

/** The OTP service (lib/otp/service.ts) over the backend and the mailer, with its metrics. */
export default fp(async function otpPlugin (fastify) {
  const { config, backend, mailer, metrics, receipts, webhooks } = fastify
  if (config.hmacKeyGenerated) {
    fastify.log.warn('OTP_HMAC_KEYS is not set: codes are signed with a key generated for this process only; set it in production')
  }
  fastify.decorate('otp', new OtpService({
    policy: admissionPolicy(config),
    signer: new CodeSigner(config.hmacKeys),
    backend,
    mailer,
    defaults: { ttlSeconds: config.otpTtlSeconds, mailFrom: config.mailFrom },
    ipv6BucketPrefix: config.ipv6BucketPrefix,
    receipts,
    events: webhooks,
    observer: {
      dispatched (key, result) {
        if (result === 'sent') {
          metrics.dispatches.inc({ mode: key.mode, result: 'sent' })
          return
        }
        metrics.dispatches.inc({ mode: key.mode, result: 'delivery_failed' })
        metrics.deliveryFailures.inc({ kind: result.deliveryFailed })
      },
      checked (key, result) {
        metrics.verifications.inc({ mode: key.mode, result })
      },
      locked (key) {
        metrics.lockouts.inc({ mode: key.mode })
      }
    }
  }))
}, { name: 'otp', dependencies: ['config', 'backend', 'mailer', 'metrics', 'receipts', 'webhooks'], fastify: '5.x' })
