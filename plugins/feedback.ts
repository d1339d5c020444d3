import fp from 'fastify-plugin'
import { SesFeedback } from '../lib/feedback/ses-feedback.js'

declare module 'fastify' {
  interface FastifyInstance {
    feedback: SesFeedback
  }
}

/**
 * SES feedback (lib/feedback/ses-feedback.ts): events become the tenant's `delivery.*`
 * webhooks, permanent bounces and complaints suppress the mailbox. MessageIds are remembered in
 * Redis when there is one, so every instance handles a message once.
 */
export default fp(async function feedbackPlugin (fastify) {
  const { config, backend, tenants, otp, receipts, webhooks, log } = fastify
  fastify.decorate('feedback', new SesFeedback({
    topicArns: config.sesFeedback.topicArns,
    certUrlPattern: config.sesFeedback.certUrlPattern,
    dedupe: backend.feedbackDedupe,
    tenant: (id) => tenants.current.tenants.get(id),
    async apply ({ tenant, mode, requestId, address, type, bounceType, suppress }) {
      const addressHash = receipts.addressHash(tenant, address)
      if (suppress) {
        let tag: string | null = null
        try {
          tag = otp.mailboxTag(address)
        } catch {
          // An address SES reports that our own validation refuses: nothing we would send to.
        }
        if (tag !== null) {
          await otp.suppressMailbox(tenant.id, mode, tag)
          log.info({ tenant: tenant.id, mode, requestId, type }, 'recipient suppressed by provider feedback')
        }
      }
      switch (type) {
        case 'delivered': webhooks.emit(tenant, mode, 'delivery.delivered', { requestId, addressHash }); break
        case 'delayed': webhooks.emit(tenant, mode, 'delivery.delayed', { requestId, addressHash }); break
        case 'bounced': webhooks.emit(tenant, mode, 'delivery.bounced', { requestId, addressHash, bounceType: bounceType ?? 'transient' }); break
        case 'complained': webhooks.emit(tenant, mode, 'delivery.complained', { requestId, addressHash }); break
      }
    }
  }))
}, { name: 'feedback', dependencies: ['config', 'backend', 'tenants', 'otp', 'receipts', 'webhooks'], fastify: '5.x' })
