import { Type, type TSchema } from '@sinclair/typebox'
import type { ErrorCode } from './error-catalog.js'
import { PROXY_REQUEST_ID_PATTERN } from './patterns.js'

interface ResponseHeader {
  description: string
  schema: TSchema
  example?: string
}

const Seconds = Type.Integer({ minimum: 0 })
const Count = Type.Integer({ minimum: 0 })

/**
 * Every response header the API promises, with its type and meaning. The OpenAPI document
 * describes each on the answers that carry it, and CORS exposes each to browsers.
 */
export const responseHeaders = {
  'X-Request-Id': {
    description: 'Identifies this answer in the service\'s logs (`reqId`): quote it when reporting a problem. A fresh UUID chosen by the service, which ignores a value sent by the client; ' +
      'behind a proxy listed in TRUST_PROXY (a mesh sidecar), the proxy\'s own `X-Request-Id` when it is 1 to 128 characters of `A-Z a-z 0-9 . _ : + = / @ -`, so that the service\'s lines match the proxy\'s access log. ' +
      'The answers written on the connection before a request could be read (400 `MALFORMED_REQUEST`, 408 `REQUEST_TIMEOUT`, 431 `HEADERS_TOO_LARGE`, and the 429 `RATE_LIMITED` of the cap on connections per source) carry a fresh UUID that no request line names: 400, 408 and 431 are logged with it at debug level, the connection cap\'s 429 only counted.',
    schema: Type.String({ minLength: 1, maxLength: 128, pattern: PROXY_REQUEST_ID_PATTERN }),
    example: '0b9f4a36-5a43-4b7e-9d55-2b0f6e0e4c1a'
  },
  'Retry-After': {
    description: 'Seconds to wait before sending the request again (RFC 9110).',
    schema: Seconds
  },
  'RateLimit-Limit': {
    description: 'Requests allowed in the window of the tightest velocity limit this request counted against (per source, recipient, backend or key; for a restricted key, only its own source\'s). On account and public routes, their own per-key or per-source limit.',
    schema: Count
  },
  'RateLimit-Remaining': {
    description: 'Requests left in that window before 429 `RATE_LIMITED`.',
    schema: Count
  },
  'RateLimit-Reset': {
    description: 'Seconds until that window resets.',
    schema: Seconds
  },
  'Quota-Limit': {
    description: 'Dispatches allowed per window by the tenant\'s billing tier (the live or the sandbox allowance, after the key\'s mode). Sent to secret keys only: a page never sees the tenant\'s volume.',
    schema: Count
  },
  'Quota-Remaining': {
    description: 'Dispatches left in the current window before 402 `QUOTA_EXCEEDED`.',
    schema: Count
  },
  'Quota-Reset': {
    description: 'Seconds until the current window ends and the allowance returns.',
    schema: Seconds
  },
  'Idempotent-Replayed': {
    description: 'Present when this is the stored answer of an earlier request with the same `Idempotency-Key` and body: nothing was sent or charged again.',
    schema: Type.Unsafe<'true'>({ type: 'string', enum: ['true'] })
  },
  'WWW-Authenticate': {
    description: 'The authentication scheme to use: `Bearer` (RFC 6750).',
    schema: Type.String(),
    example: 'Bearer realm="email-otp"'
  }
} as const satisfies Record<string, ResponseHeader>

export type ResponseHeaderName = keyof typeof responseHeaders

export const responseHeaderNames = Object.keys(responseHeaders) as ResponseHeaderName[]

/**
 * Which answers carry which headers. A row applies to the answers that match all of its
 * filters; a filter left out matches everything: `operations` by operationId, `statuses`,
 * and `codes` (error answers listing one of these codes). `required`: every such answer
 * carries the headers (generated clients then type them as always present), or, with
 * `codes`, every answer whose codes are all the row's; otherwise some do. A new header is one entry above and one row here; a new route that carries a header is
 * its operationId added to a row.
 */
export interface HeaderPlacement {
  headers: readonly ResponseHeaderName[]
  operations?: readonly string[]
  statuses?: readonly number[]
  codes?: readonly ErrorCode[]
  required?: boolean
}

const rateLimit = ['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset'] as const
const quota = ['Quota-Limit', 'Quota-Remaining', 'Quota-Reset'] as const

export const responseHeaderPlacements: readonly HeaderPlacement[] = [
  { headers: ['X-Request-Id'], required: true },
  { headers: ['WWW-Authenticate'], codes: ['UNAUTHORIZED'], required: true },
  { headers: ['Retry-After'], codes: ['RATE_LIMITED', 'IDEMPOTENCY_IN_FLIGHT', 'UNAVAILABLE', 'TENANT_MISCONFIGURED'], required: true },
  // Answers given after the velocity limits were counted carry the tightest limit's state (a
  // lockout's 429 and a replayed answer do not).
  { headers: rateLimit, codes: ['RATE_LIMITED'] },
  { headers: rateLimit, operations: ['dispatchCode'], statuses: [200, 402, 502] },
  // The routes outside the OTP admission step (@fastify/rate-limit): the account routes count
  // after authentication (readiness, a probe, is never limited).
  { headers: rateLimit, operations: ['getUsage'], statuses: [200, 503] },
  { headers: rateLimit, operations: ['getVerification'], statuses: [200, 404, 503] },
  { headers: rateLimit, operations: ['getInsights'], statuses: [200, 400, 503] },
  { headers: rateLimit, operations: ['unlockRecipient', 'suppressRecipient', 'unsuppressRecipient'], statuses: [200, 400, 503] },
  { headers: rateLimit, operations: ['previewTemplate'], statuses: [200, 400] },
  { headers: rateLimit, operations: ['listSandboxMessages'], statuses: [200, 400, 404, 503] },
  { headers: rateLimit, operations: ['getReceiptKeys'], statuses: [200], required: true },
  // Its limit is counted per source as the request arrives, before an expectation is refused.
  { headers: rateLimit, operations: ['getReceiptKeys'], statuses: [417] },
  { headers: rateLimit, operations: ['redeemReceipt'], statuses: [200, 400, 409, 503] },
  { headers: rateLimit, operations: ['verifyCode'], statuses: [200], required: true },
  { headers: rateLimit, operations: ['verifyCode'], statuses: [400] },
  // Answers to secret keys given after the allowance was counted carry its state, replayed ones included.
  { headers: quota, operations: ['dispatchCode'], statuses: [200, 402, 502] },
  // The answers an Idempotency-Key keeps: those of dispatches whose mail left.
  { headers: ['Idempotent-Replayed'], operations: ['dispatchCode'], statuses: [200] }
]
