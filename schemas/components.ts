import type { TSchema } from '@sinclair/typebox'
import { ErrorBody, ErrorCodeSchema } from './errors.js'
import { LiveReply, ReadyReply } from './health.js'
import { DispatchBody, DispatchReply, VerifyBody, VerifyReply } from './otp.js'
import { JwksReply, RedeemBody, RedeemReply } from './receipts.js'
import { FeedbackReply, SuppressBody, SuppressReply, UnlockBody, UnlockReply, UnsuppressReply } from './recipients.js'
import { SandboxMessagesReply } from './sandbox.js'
import { TemplatePreviewBody, TemplatePreviewReply } from './templates.js'
import { UsageReply } from './usage.js'
import { VerificationReply } from './verifications.js'
import { InsightsReply } from './insights.js'

/**
 * The named schemas, registered once with Fastify and published as
 * `#/components/schemas/<$id>`. Routes use them through ref(); a schema that a route refers
 * to but that is missing here stops the service at start-up.
 */
export const namedSchemas: readonly TSchema[] = [
  ErrorCodeSchema, ErrorBody,
  DispatchBody, DispatchReply, VerifyBody, VerifyReply,
  UsageReply, VerificationReply, InsightsReply, SandboxMessagesReply, UnlockBody, UnlockReply, SuppressBody, SuppressReply, UnsuppressReply, FeedbackReply,
  RedeemBody, RedeemReply, JwksReply,
  TemplatePreviewBody, TemplatePreviewReply,
  LiveReply, ReadyReply
]
