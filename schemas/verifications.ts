import { Type, type TSchema } from '@sinclair/typebox'

const at = Type.String({ format: 'date-time', description: 'When it happened.' })

function event<T extends string> (type: T, description: string, fields: Record<string, TSchema> = {}): TSchema {
  return Type.Object({ type: Type.Literal(type), at, ...fields }, { description })
}

/** The events of a story, in the words of the `delivery.*` and `verification.*` webhooks. */
const VerificationEvent = Type.Union([
  event('requested', 'The dispatch was admitted and the code issued.', {
    keyId: Type.String({ description: 'The id of the key that asked.' }),
    expiresAt: Type.String({ format: 'date-time', description: 'When the code stops verifying.' })
  }),
  event('sent', 'The mail left through a provider.', {
    provider: Type.String({ description: 'The provider that accepted it: `ses`, `smtp`, `log`, or `sandbox` for a sandbox key.' }),
    messageId: Type.Optional(Type.String({ description: "The provider's id of the message, to look it up there: SES's MessageId, or the Message-ID the SMTP relay was given. Absent for `log` and `sandbox`." }))
  }),
  event('delivery_failed', 'The mail could not be handed to the provider (dispatch answered 502); the code was destroyed and nothing was charged.', {
    reason: Type.String({ description: 'As the `delivery.failed` webhook says it (`timeout`, `connection`, `throttled`, `provider`, `rejected`, `unavailable`, `unknown`), `suppressed`: a page\'s dispatch to a suppressed mailbox, or `sending_paused`: a page\'s live dispatch while the tenant\'s live sending is paused, each answered as a failed delivery.' })
  }),
  event('delivered', "The recipient's mail server accepted the message (SES feedback)."),
  event('delayed', 'The provider could not deliver yet and keeps trying (SES feedback).'),
  event('bounced', "The recipient's mail server refused the message (SES feedback).", {
    bounceType: Type.Union([Type.Literal('permanent'), Type.Literal('transient')])
  }),
  event('complained', 'The recipient marked the message as spam (SES feedback).'),
  event('wrong_guess', 'A verify of this requestId that did not verify. Never the guess itself.', {
    reason: Type.Union([Type.Literal('wrong_code'), Type.Literal('malformed_code')])
  }),
  event('locked', "That wrong guess locked the recipient's mailbox (recipient.locked)."),
  event('verified', 'The right code: the person controls the address.'),
  event('receipt_redeemed', "The verification's receipt was redeemed (POST /otp/receipts/redeem)."),
  event('expired', "The code's lifetime ended before anything else happened to it (derived when read).")
])

export const VerificationReply = Type.Object({
  success: Type.Literal(true),
  data: Type.Object({
    requestId: Type.String(),
    mode: Type.Union([Type.Literal('live'), Type.Literal('test')], { description: 'The mode of the keys that can read it: `test` for sandbox keys.' }),
    state: Type.Union(['pending', 'verified', 'failed', 'locked', 'expired', 'delivery_failed'].map((state) => Type.Literal(state)), {
      description: '`pending`: sent, not yet guessed, within its lifetime; `verified`; `failed`: a guess that was not the code used it up; `locked`: that guess also locked the mailbox; `expired`: unused past its lifetime; `delivery_failed`: the mail never left.'
    }),
    createdAt: Type.String({ format: 'date-time' }),
    expiresAt: Type.String({ format: 'date-time' }),
    wrongGuesses: Type.Integer({ minimum: 0, description: 'Verifies of this requestId that did not verify.' }),
    events: Type.Array(VerificationEvent, { description: 'In the order they happened. Listed up to a bound per type: 24 `wrong_guess`, 8 `delayed`, the first of every other type; so the end of a story is listed however often it was guessed at.' }),
    eventsOmitted: Type.Integer({ minimum: 0, description: 'Events past their type\'s bound: counted, not listed.' })
  })
}, { $id: 'VerificationReply', description: 'The story of one verification, without the address or the code.' })
