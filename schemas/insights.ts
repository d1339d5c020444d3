import { Type, type TSchema } from '@sinclair/typebox'

/** Why a mail did not leave, as `delivery.failed` and the verification's `delivery_failed` event say it. */
export const DELIVERY_FAILURE_REASONS = ['timeout', 'connection', 'throttled', 'provider', 'rejected', 'unavailable', 'unknown', 'suppressed', 'sending_paused'] as const

/** The refusals counted, by status. */
export const REFUSED_STATUSES = ['402', '403', '429'] as const

const count = (description: string): TSchema => Type.Integer({ minimum: 0, description })

const counts = <K extends string>(names: readonly K[], description: string): TSchema =>
  Type.Object(Object.fromEntries(names.map((name) => [name, Type.Integer({ minimum: 0 })])), { description })

const Duration = Type.Union([
  Type.Object({
    p50: Type.Number({ minimum: 0, description: 'Seconds: the median, estimated from the histogram (linear inside its bin).' }),
    p90: Type.Number({ minimum: 0, description: 'Seconds: the 90th percentile, estimated likewise.' }),
    count: Type.Integer({ minimum: 1, description: 'Verifications measured.' })
  }),
  Type.Null()
], { description: 'Null when none was measured.' })

/** The funnel's fields, for one bucket and for the totals. */
const funnel = {
  requested: count('Dispatches admitted (a code was issued).'),
  sent: count('Of those, mails a provider accepted.'),
  deliveryFailed: counts(DELIVERY_FAILURE_REASONS, 'Dispatches whose mail did not leave, by reason (as `delivery.failed`): answered 502, nothing charged.'),
  delivered: count("Mails the recipient's server accepted (SES feedback)."),
  bounced: counts(['permanent', 'transient'], 'Mails bounced (SES feedback), by bounce type.'),
  complained: count('Mails marked as spam (SES feedback).'),
  verified: count('Verifications whose right code was entered.'),
  wrongGuesses: count('Verifies of these requestIds that did not verify, every one.'),
  locked: count('Verifications whose wrong guess locked the mailbox.'),
  receiptsRedeemed: count('Receipts of these verifications redeemed.'),
  refused: counts(REFUSED_STATUSES, "The tenant's keys' requests answered 402 (allowance used up), 403 (refused: recipient, CAPTCHA, end-user address…) or 429 (rate limited), by status, in the hour they were answered."),
  conversion: Type.Union([Type.Number({ minimum: 0, maximum: 1 }), Type.Null()], { description: 'Verified after their mail was sent ÷ sent; null when nothing was sent.' }),
  timeToVerify: Duration,
  timeToDelivery: Duration
}

export const InsightsQuery = Type.Object({
  granularity: Type.Optional(Type.Union([Type.Literal('hour'), Type.Literal('day')], { default: 'day', description: 'Bucket size: UTC hours (at most 168 per answer) or UTC days (at most 400).' })),
  from: Type.Optional(Type.String({ maxLength: 64, description: 'RFC 3339 date-time; the range starts with the bucket it falls in. Default: `to` minus 24 hours (hour) or 30 days (day). Before the oldest data kept (INSIGHTS_DAYS) it is moved up to it (`dataStart`).', examples: ['2026-11-01T00:00:00Z'] })),
  to: Type.Optional(Type.String({ maxLength: 64, description: 'RFC 3339 date-time, exclusive: the range ends with the bucket it falls in (or before it, when it is a bucket\'s start). Default: now.', examples: ['2026-11-28T00:00:00Z'] }))
}, { additionalProperties: false })

export const InsightsReply = Type.Object({
  success: Type.Literal(true),
  data: Type.Object({
    granularity: Type.Union([Type.Literal('hour'), Type.Literal('day')]),
    from: Type.String({ format: 'date-time', description: 'The first bucket\'s start.' }),
    to: Type.String({ format: 'date-time', description: 'The last bucket\'s end.' }),
    dataStart: Type.String({ format: 'date-time', description: 'The oldest bucket still kept (INSIGHTS_DAYS): nothing before it is answered.' }),
    buckets: Type.Array(Type.Object({ start: Type.String({ format: 'date-time' }), ...funnel }), { description: 'Every bucket of the range in order, zeros included. A verification counts in the bucket it was requested in, whenever its later events came.' }),
    totals: Type.Object(funnel, { description: 'The same over the whole range.' })
  })
}, { $id: 'InsightsReply', description: "The tenant's funnel in the key's mode, per hour or day." })
