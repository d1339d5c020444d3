import { Type, type Static } from '@sinclair/typebox'
import { REQUEST_ID_PATTERN } from './patterns.js'
import { Receipt } from './receipts.js'

export const DispatchBody = Type.Object({
  email: Type.String({
    minLength: 1,
    maxLength: 1024,
    description: 'Destination address. Trimmed and NFC-normalised, then checked by RFC 5322 rules and a strict policy (no display names, comments or quoted local parts; ASCII local part; internationalised domains are converted to punycode).',
    examples: ['ada@example.com']
  }),
  locale: Type.Optional(Type.String({
    pattern: '^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8}){0,3}$',
    description: 'Language of the mail (BCP 47, e.g. `fr` or `de-CH`), among the tenant\'s: en, fr, de, es and any language it writes its own templates in (`fr-CA` gets `fr`). Unset or unavailable: the best match of Accept-Language, else the tenant\'s default language (English unless it sets one).',
    examples: ['fr']
  }))
}, { $id: 'DispatchRequest', additionalProperties: false })

export const DispatchReply = Type.Object({
  success: Type.Literal(true),
  message: Type.String(),
  data: Type.Object({
    requestId: Type.String({ description: 'Opaque id of this code; send it back on verify. 128 random bits, URL-safe.', examples: ['otp_3q2-7wX0aH4vQm1sT9bK8c'] })
  })
}, { $id: 'DispatchReply', description: 'A code was mailed; `data.requestId` identifies it on verify.' })

export const VerifyBody = Type.Object({
  requestId: Type.String({ pattern: REQUEST_ID_PATTERN, description: 'The requestId returned by dispatch.' }),
  userGuess: Type.String({ minLength: 1, maxLength: 64, description: 'The code typed by the user. Surrounding whitespace is trimmed; it must then be exactly 6 ASCII digits.', examples: ['042917'] })
}, { $id: 'VerifyRequest', additionalProperties: false })

export const VerifyReply = Type.Object({
  success: Type.Literal(true),
  message: Type.String(),
  data: Type.Object({ receipt: Receipt })
}, { $id: 'VerifyReply', description: 'The guess matched the code of the requestId: the person controls the address. The code is used up; the receipt proves it to the tenant\'s backend.' })

export type DispatchBodyType = Static<typeof DispatchBody>
export type VerifyBodyType = Static<typeof VerifyBody>

const EndUserIpHeader = Type.Optional(Type.String({
  description: 'Secret keys only: the address (IPv4 or IPv6) of the end user a backend calls for. Block lists and per-source limits then apply to that address, and the backend gets its own, higher ceiling. Invalid: 400 INVALID_END_USER_IP; with a restricted key: 400 END_USER_IP_NOT_ALLOWED.'
}))

export const DispatchHeaders = Type.Object({
  'idempotency-key': Type.Optional(Type.String({
    minLength: 1,
    maxLength: 255,
    description: 'Makes retries safe: the same key with the same body within 24 hours returns the first successful answer (same requestId, no second mail, no second charge); with another body, 422 IDEMPOTENCY_MISMATCH; while the first is still running, 409 IDEMPOTENCY_IN_FLIGHT (retry after a second). A key runs at most once in its 24 hours: when the first request may have sent its code and its answer could not be recorded, 409 IDEMPOTENCY_OUTCOME_UNKNOWN (use a new key for a new code). A refusal, 502 or 503 keeps nothing: the same key really runs again.'
  })),
  'end-user-ip': EndUserIpHeader,
  'captcha-token': Type.Optional(Type.String({
    description: 'The answer of the CAPTCHA widget (Turnstile, hCaptcha or reCAPTCHA) when the key\'s tenant requires one; single use. Missing: 403 CAPTCHA_REQUIRED; refused by the provider: 403 CAPTCHA_INVALID; provider unreachable: 503 UNAVAILABLE.'
  }))
})

export const VerifyHeaders = Type.Object({
  'end-user-ip': EndUserIpHeader
})
