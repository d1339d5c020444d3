import { Type } from '@sinclair/typebox'

export const UnlockBody = Type.Object({
  email: Type.String({ minLength: 1, maxLength: 1024, description: 'The recipient whose lock to clear; every spelling of its mailbox is the same one.', examples: ['ada@example.com'] })
}, { $id: 'UnlockRequest', additionalProperties: false })

export const UnlockReply = Type.Object({
  success: Type.Literal(true),
  message: Type.String(),
  data: Type.Object({
    cleared: Type.Boolean({ description: 'Whether the mailbox had a lock or a run of wrong guesses to forget.' })
  })
}, { $id: 'UnlockReply' })

export const SuppressBody = Type.Object({
  email: Type.String({ minLength: 1, maxLength: 1024, description: 'The recipient to suppress or release; every spelling of its mailbox is the same one.', examples: ['ada@example.com'] })
}, { $id: 'SuppressRequest', additionalProperties: false })

export const SuppressReply = Type.Object({
  success: Type.Literal(true),
  message: Type.String(),
  data: Type.Object({
    suppressedUntil: Type.String({ format: 'date-time', description: 'When the suppression ends unless lifted earlier (SUPPRESSION_DAYS from now).' })
  })
}, { $id: 'SuppressReply' })

export const UnsuppressReply = Type.Object({
  success: Type.Literal(true),
  message: Type.String(),
  data: Type.Object({
    lifted: Type.Boolean({ description: 'Whether the mailbox was suppressed.' })
  })
}, { $id: 'UnsuppressReply' })

export const FeedbackReply = Type.Object({
  success: Type.Literal(true),
  message: Type.Union(['handled', 'confirmed', 'duplicate', 'ignored'].map((outcome) => Type.Literal(outcome)), { description: '`handled`: the event became webhooks (and a suppression); `confirmed`: the subscription is confirmed; `duplicate`: this MessageId was handled before; `ignored`: nothing the service sent, or an event type it does not act on.' })
}, { $id: 'FeedbackReply' })

/**
 * The body a POST /feedback/ses reads. SNS's own limit is 256 KiB of `Message`, which its JSON
 * escaping can take past this; an SES event is a few KiB (the headers of a message the service
 * composed, which SES cuts past 10 KB anyway, and its one recipient), so the bodies the service
 * acts on never come near it, and a larger limit would only make a stranger's accepted bodies
 * dearer.
 */
export const SNS_BODY_LIMIT = 262_144

const SNS_NOTIFICATION_EXAMPLE = {
  Type: 'Notification',
  MessageId: '22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324',
  TopicArn: 'arn:aws:sns:eu-west-1:123456789012:ses-events',
  Message: '{"eventType":"Bounce","bounce":{"bounceType":"Permanent","bouncedRecipients":[{"emailAddress":"ada@example.com"}]},"mail":{"messageId":"0102018f-example"}}',
  Timestamp: '2026-11-28T10:00:00.000Z',
  SignatureVersion: '2',
  Signature: 'EXAMPLEpH+DcEwjAPg8O9mY8dReBSwksfg2S7WKQcikcNKWLQjwu6A4VbeS0QHVCkhRS7fUQvi2egU3N858fiTDN6bkkOxYDVrY0Ad8L10Hs3zH81mtnPk5uvvolIC1CXGu43obcgFxeL3khZl8IKvO61GWB6jI9b5+gLPoBc1Q=',
  SigningCertURL: 'https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem',
  UnsubscribeURL: 'https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:eu-west-1:123456789012:ses-events:0000'
}

const snsField = (description: string): ReturnType<typeof Type.String> => Type.String({ description })

/**
 * What SNS posts to an HTTPS subscription, as the OpenAPI document describes it. The route
 * parses the body itself, once it has this shape (lib/feedback/sns-envelope.ts), and the
 * feedback receiver checks the message (the fields of its type, the topic, the age, the
 * certificate, the signature): this schema documents, it does
 * not validate.
 */
export const SnsMessage = Type.Object({
  Type: Type.Union([Type.Literal('Notification'), Type.Literal('SubscriptionConfirmation'), Type.Literal('UnsubscribeConfirmation')]),
  MessageId: snsField('Handled once: a repeated MessageId answers `duplicate`.'),
  TopicArn: snsField('One of SES_FEEDBACK_TOPIC_ARNS.'),
  Subject: Type.Optional(snsField('Notifications only, when the publisher set one.')),
  Message: snsField('For a notification, the SES event as JSON text.'),
  Timestamp: snsField('ISO 8601; older than an hour is refused (SNS_MESSAGE_STALE).'),
  SubscribeURL: Type.Optional(snsField('Subscription confirmations: fetched to confirm a listed topic.')),
  Token: Type.Optional(snsField('Subscription confirmations.')),
  SignatureVersion: Type.Union([Type.Literal('1'), Type.Literal('2')]),
  Signature: snsField('Base64 RSA signature over the canonical fields.'),
  SigningCertURL: snsField('Must match SNS_SIGNING_CERT_URL_PATTERN.'),
  UnsubscribeURL: Type.Optional(Type.String()),
  MessageAttributes: Type.Optional(Type.Object({}, { additionalProperties: Type.Object({ Type: Type.String(), Value: Type.String() }, { additionalProperties: false }), maxProperties: 10, description: 'Sent unsigned, never read; SES sets none.' }))
}, { additionalProperties: false, description: 'An SNS HTTP/S message (at most 256 KiB): SNS\'s fields only, each once; at most 10 `MessageAttributes`.', examples: [SNS_NOTIFICATION_EXAMPLE] })

/** SNS sends its JSON as `text/plain`; a client or a test may send `application/json`. */
export const SnsRequestBody = {
  required: true,
  content: {
    'text/plain': {
      schema: Type.String({
        minLength: 1,
        maxLength: SNS_BODY_LIMIT,
        description: 'The SNS message as JSON text (what SNS sends): the same fields as the `application/json` form, at most 256 KiB.',
        examples: [JSON.stringify(SNS_NOTIFICATION_EXAMPLE)]
      })
    },
    'application/json': { schema: SnsMessage }
  }
}
