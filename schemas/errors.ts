import { Type, type TSchema } from '@sinclair/typebox'
import { errorCatalog, type ErrorCode } from './error-catalog.js'

/** The one error body of the API. */
export function errorBody (codes: readonly ErrorCode[]): TSchema {
  return Type.Object({
    success: Type.Literal(false),
    message: Type.String({ description: 'Human-readable; may change. Branch on `code`.' }),
    code: Type.Union(codes.map((code) => Type.Literal(code)), { description: 'Stable error code.' })
  }, {
    description: codes.map((code) => `\`${code}\`: ${errorCatalog[code].message}.`).join(' '),
    examples: [{ success: false, message: errorCatalog[codes[0] as ErrorCode].message, code: codes[0] }]
  })
}

/** Response schemas for the given error codes, grouped by their HTTP status. */
export function errorResponses (codes: readonly ErrorCode[]): Record<number, TSchema> {
  const byStatus = new Map<number, ErrorCode[]>()
  for (const code of new Set(codes)) {
    const status = errorCatalog[code].status
    byStatus.set(status, [...(byStatus.get(status) ?? []), code])
  }
  return Object.fromEntries([...byStatus].map(([status, group]) => [status, errorBody(group)]))
}

/**
 * Answers any route can give before its handler runs (the connection, body handling, keys,
 * outages). The connection's own (MALFORMED_REQUEST, REQUEST_TIMEOUT, HEADERS_TOO_LARGE) are
 * written by the client error handler, listed here so the document names them.
 */
export const commonErrors: readonly ErrorCode[] = [
  'MALFORMED_REQUEST', 'REQUEST_TIMEOUT', 'HEADERS_TOO_LARGE',
  'INVALID_BODY', 'INVALID_JSON', 'INVALID_FORWARDED_FOR', 'UNAUTHORIZED', 'ORIGIN_NOT_ALLOWED', 'SECRET_KEY_IN_BROWSER', 'SOURCE_BLOCKED',
  'INVALID_END_USER_IP', 'END_USER_IP_NOT_ALLOWED', 'END_USER_IP_REQUIRED',
  // Every authenticated request counts against its caller's limits, refused or not.
  'RATE_LIMITED',
  'PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE', 'INTERNAL', 'UNAVAILABLE'
]
