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
