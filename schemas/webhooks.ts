import { Type, type Static, type TSchema } from '@sinclair/typebox'

/** Every event a tenant's webhook endpoint can subscribe to. */
export const WEBHOOK_EVENT_TYPES = [
  'verification.succeeded',
  'verification.failed',
  'delivery.failed',
  'delivery.delivered',
  'delivery.delayed',
  'delivery.bounced',
  'delivery.complained',
  'recipient.locked',
  'quota.threshold',
  'review.used',
  'tenant.sending_paused'
] as const

export type WebhookEventType = typeof WEBHOOK_EVENT_TYPES[number]

/** `whsec_` and the base64 of 24 to 64 random bytes, as the Standard Webhooks specification writes secrets. */
export const WEBHOOK_SECRET_PATTERN = '^whsec_[A-Za-z0-9+/]{32,88}={0,2}$'

const Mode = Type.Union([Type.Literal('live'), Type.Literal('test')], { description: 'The key mode the event happened in: `test` is the sandbox.' })
const RequestId = Type.String({ description: 'The requestId of the code the event is about.', examples: ['otp_3q2-7wX0aH4vQm1sT9bK8c'] })
const AddressHash = Type.String({
  pattern: '^[A-Za-z0-9_-]{22}$',
  description: 'Keyed hash of the recipient address, never the address: base64url of the first 16 bytes of HMAC-SHA256(tenant address hash key, lower-cased address). See "Trusting a browser verification" in the README.'
})

/** The common shape: what happened, when, and its data (tenant and mode always in it). */
function payload<T extends TSchema> (type: WebhookEventType, description: string, data: T) {
  return Type.Object({
    type: Type.Literal(type),
    timestamp: Type.String({ format: 'date-time', description: 'When the event happened (ISO 8601, UTC).' }),
    data
  }, { title: type, description, additionalProperties: false })
}

const Base = {
  tenant: Type.String({ description: 'The tenant id.' }),
  mode: Mode
}

export const VerificationSucceededPayload = payload('verification.succeeded', 'A guess matched its code: the recipient proved control of the address. Signing the receipt and sending this event are independent; the receipt is what a backend redeems.', Type.Object({
  ...Base,
  requestId: RequestId,
  addressHash: AddressHash
}, { additionalProperties: false }))

export const VerificationFailedPayload = payload('verification.failed', 'A guess did not match its code (or was not 6 digits); the code is used up. Unknown, expired and used requestIds send no event.', Type.Object({
  ...Base,
  requestId: RequestId,
  addressHash: AddressHash,
  reason: Type.Union([Type.Literal('wrong_code'), Type.Literal('malformed_code')])
}, { additionalProperties: false }))

export const DeliveryFailedPayload = payload('delivery.failed', 'The mail with the code could not be handed to the provider; dispatch answered 502, the code was destroyed and nothing was charged.', Type.Object({
  ...Base,
  requestId: RequestId,
  addressHash: AddressHash,
  reason: Type.Union(['timeout', 'connection', 'throttled', 'provider', 'rejected', 'unavailable', 'unknown'].map((kind) => Type.Literal(kind)), { description: 'The kind of failure.' })
}, { additionalProperties: false }))

const feedbackNote = 'From the provider\'s feedback (SES event publishing through SNS, POST /feedback/ses), mapped to the dispatch by the message tags the service sets; live mail only.'

export const DeliveryDeliveredPayload = payload('delivery.delivered', `The recipient's mail server accepted the message. ${feedbackNote}`, Type.Object({
  ...Base,
  requestId: RequestId,
  addressHash: AddressHash
}, { additionalProperties: false }))

export const DeliveryDelayedPayload = payload('delivery.delayed', `The provider could not deliver the message yet and keeps trying. ${feedbackNote}`, Type.Object({
  ...Base,
  requestId: RequestId,
  addressHash: AddressHash
}, { additionalProperties: false }))

export const DeliveryBouncedPayload = payload('delivery.bounced', `The recipient's mail server refused the message. A permanent bounce suppresses the mailbox for SUPPRESSION_DAYS. ${feedbackNote}`, Type.Object({
  ...Base,
  requestId: RequestId,
  addressHash: AddressHash,
  bounceType: Type.Union([Type.Literal('permanent'), Type.Literal('transient')], { description: '`permanent`: the address does not exist or refuses mail for good (the mailbox is now suppressed); `transient`: a full mailbox, a message too large, an undetermined cause.' })
}, { additionalProperties: false }))

export const DeliveryComplainedPayload = payload('delivery.complained', `The recipient marked the message as spam; the mailbox is now suppressed for SUPPRESSION_DAYS. ${feedbackNote}`, Type.Object({
  ...Base,
  requestId: RequestId,
  addressHash: AddressHash
}, { additionalProperties: false }))

export const RecipientLockedPayload = payload('recipient.locked', 'Wrong guesses for this recipient reached LOCKOUT_THRESHOLD: dispatch to the address answers 429 until `lockedUntil`. Sent once per lockout.', Type.Object({
  ...Base,
  requestId: Type.String({ description: 'The requestId of the guess that reached the threshold.' }),
  addressHash: AddressHash,
  lockedUntil: Type.String({ format: 'date-time' })
}, { additionalProperties: false }))

export const QuotaThresholdPayload = payload('quota.threshold', "A dispatch took the tenant's usage of its allowance (live or sandbox, per `mode`) to 80% or 100%. Sent once per window and threshold.", Type.Object({
  ...Base,
  requestId: Type.String({ description: 'The dispatch that reached the threshold.' }),
  threshold: Type.Union([Type.Literal(80), Type.Literal(100)], { description: 'Percent of the allowance.' }),
  limit: Type.Integer(),
  used: Type.Integer(),
  window: Type.String({ description: 'The tier window (`1d`, `month`…).' }),
  resetsAt: Type.String({ format: 'date-time', description: 'When the window ends and the allowance returns.' })
}, { additionalProperties: false }))

export const ReviewUsedPayload = payload('review.used', 'A dispatch went to one of the tenant\'s review addresses (`reviewAddresses`): no mail was sent and nothing charged; the fixed code verifies once for this requestId. An unexpected one means the review code leaked.', Type.Object({
  ...Base,
  requestId: RequestId,
  addressHash: AddressHash,
  keyId: Type.String({ description: 'The API key that asked.' }),
  source: Type.String({ description: 'Where the request came from: the source address (the end user\'s, with End-User-IP), or for a workload inside a service mesh the bucket it is counted in (`wl:` and its identity, or `mesh:unidentified`).' })
}, { additionalProperties: false }))

export const TenantSendingPausedPayload = payload('tenant.sending_paused', 'The tenant\'s live mail bounced permanently or drew complaints past a threshold of the shared sending reputation (docs/reputation.md), over at least REPUTATION_MIN_SENDS live sends in the window: its live dispatches with a secret key answer 403 `TENANT_SENDING_PAUSED` (with a restricted key, a failed delivery) until an operator resumes them (`email-otp tenants resume`) or the window\'s rates fall below the thresholds. The sandbox keeps working, and codes already sent still verify. Sent once per pause; `mode` is always `live`.', Type.Object({
  ...Base,
  since: Type.String({ format: 'date-time', description: 'When the pause began.' }),
  window: Type.String({ description: 'The rolling window the rates are counted over (REPUTATION_WINDOW, e.g. `24h`).' }),
  sent: Type.Integer({ description: 'Live mails sent in the window.' }),
  bounced: Type.Integer({ description: 'Permanent bounces in the window (with partner reports of POST /recipients/suppress when SES feedback is not configured).' }),
  complained: Type.Integer({ description: 'Complaints in the window.' }),
  bounceRate: Type.Number({ description: 'bounced ÷ sent.' }),
  complaintRate: Type.Number({ description: 'complained ÷ sent.' }),
  thresholds: Type.Object({
    bounceRate: Type.Union([Type.Number(), Type.Null()], { description: 'REPUTATION_BOUNCE_RATE (null: off).' }),
    complaintRate: Type.Union([Type.Number(), Type.Null()], { description: 'REPUTATION_COMPLAINT_RATE (null: off).' }),
    minSends: Type.Integer({ description: 'REPUTATION_MIN_SENDS.' })
  }, { additionalProperties: false })
}, { additionalProperties: false }))

export const WebhookPayloads = [
  VerificationSucceededPayload,
  VerificationFailedPayload,
  DeliveryFailedPayload,
  DeliveryDeliveredPayload,
  DeliveryDelayedPayload,
  DeliveryBouncedPayload,
  DeliveryComplainedPayload,
  RecipientLockedPayload,
  QuotaThresholdPayload,
  ReviewUsedPayload,
  TenantSendingPausedPayload
] as const

/** The `data` of each event type, as the service builds it. */
export interface WebhookEventData {
  'verification.succeeded': Omit<Static<typeof VerificationSucceededPayload>['data'], 'tenant' | 'mode'>
  'verification.failed': Omit<Static<typeof VerificationFailedPayload>['data'], 'tenant' | 'mode'>
  'delivery.failed': Omit<Static<typeof DeliveryFailedPayload>['data'], 'tenant' | 'mode'>
  'delivery.delivered': Omit<Static<typeof DeliveryDeliveredPayload>['data'], 'tenant' | 'mode'>
  'delivery.delayed': Omit<Static<typeof DeliveryDelayedPayload>['data'], 'tenant' | 'mode'>
  'delivery.bounced': Omit<Static<typeof DeliveryBouncedPayload>['data'], 'tenant' | 'mode'>
  'delivery.complained': Omit<Static<typeof DeliveryComplainedPayload>['data'], 'tenant' | 'mode'>
  'recipient.locked': Omit<Static<typeof RecipientLockedPayload>['data'], 'tenant' | 'mode'>
  'quota.threshold': Omit<Static<typeof QuotaThresholdPayload>['data'], 'tenant' | 'mode'>
  'review.used': Omit<Static<typeof ReviewUsedPayload>['data'], 'tenant' | 'mode'>
  'tenant.sending_paused': Omit<Static<typeof TenantSendingPausedPayload>['data'], 'tenant' | 'mode'>
}

/** The published JSON Schema of every webhook body (schemas/webhooks.schema.json). */
export const WebhookPayloadsDocument = {
  $id: 'https://email-otp.dev/schemas/webhooks.schema.json',
  title: 'email-otp webhook payloads',
  description: 'The JSON body of each webhook event. Every request carries the Standard Webhooks headers webhook-id, webhook-timestamp and webhook-signature.',
  oneOf: WebhookPayloads.map((schema) => ({ $ref: `#/definitions/${schema.title ?? ''}` })),
  definitions: Object.fromEntries(WebhookPayloads.map((schema) => [schema.title ?? '', schema]))
}
