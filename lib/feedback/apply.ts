import type { KeyMode } from '../keys/api-keys.js'
import type { Receipts } from '../receipts/receipts.js'
import type { VerificationLog } from '../state/verification-log.js'
import type { EventSink } from '../webhooks/events.js'
import type { DeliveryFeedback } from './ses-feedback.js'

/** What acting on feedback needs of the OTP service: the tag a mailbox is kept under, and its suppression. */
export interface MailboxSuppression {
  mailboxTag (address: string): string
  suppressMailbox (tenantId: string, mode: KeyMode, recipientTag: string): Promise<unknown>
}

/** What acting on feedback needs of the reputation guard: a permanent bounce or a complaint of live mail counted. */
export interface ReputationCounter {
  feedback (tenantId: string, event: 'bounced' | 'complained'): Promise<void>
}

export interface FeedbackEffects {
  receipts: Pick<Receipts, 'addressHash'>
  mailboxes: MailboxSuppression
  webhooks: Pick<EventSink, 'emit'>
  /** The verification's story the outcome is added to. */
  verifications: Pick<VerificationLog, 'record'>
  reputation: ReputationCounter
  log: { info (bindings: object, message: string): void }
}

/**
 * What a recipient's outcome does: it becomes the tenant's `delivery.*` webhook and an event of
 * the verification's story, and a permanent bounce or a complaint suppresses the mailbox.
 */
export function applyFeedback ({ receipts, mailboxes, webhooks, verifications, reputation, log }: FeedbackEffects): (feedback: DeliveryFeedback) => Promise<void> {
  return async ({ tenant, mode, requestId, address, type, bounceType, suppress }) => {
    const addressHash = receipts.addressHash(tenant, address)
    if (suppress) {
      let tag: string | null = null
      try {
        tag = mailboxes.mailboxTag(address)
      } catch {
        // An address SES reports that our own validation refuses: nothing we would send to.
      }
      if (tag !== null) {
        await mailboxes.suppressMailbox(tenant.id, mode, tag)
        log.info({ tenant: tenant.id, mode, requestId, type }, 'recipient suppressed by provider feedback')
      }
    }
    const at = new Date().toISOString()
    const story = { tenantId: tenant.id, mode, requestId }
    verifications.record(story, type === 'bounced' ? { type, at, bounceType: bounceType ?? 'transient' } : { type, at })
    switch (type) {
      case 'delivered': webhooks.emit(tenant, mode, 'delivery.delivered', { requestId, addressHash }); break
      case 'delayed': webhooks.emit(tenant, mode, 'delivery.delayed', { requestId, addressHash }); break
      case 'bounced': webhooks.emit(tenant, mode, 'delivery.bounced', { requestId, addressHash, bounceType: bounceType ?? 'transient' }); break
      case 'complained': webhooks.emit(tenant, mode, 'delivery.complained', { requestId, addressHash }); break
    }
    // The shared reputation is the live mail's: a sandbox outcome is simulated.
    if (mode === 'live' && (type === 'complained' || (type === 'bounced' && bounceType === 'permanent'))) {
      await reputation.feedback(tenant.id, type)
    }
  }
}
