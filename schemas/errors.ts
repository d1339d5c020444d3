import { Type, type TSchema } from '@sinclair/typebox'
import { errorCatalog, errorCodes, type ErrorCode } from './error-catalog.js'
import { ref } from './ref.js'

/** Every stable error code, as one enum: clients branch on it. */
export const ErrorCodeSchema = Type.Unsafe<ErrorCode>({
  $id: 'ErrorCode',
  type: 'string',
  enum: errorCodes,
  description: 'Stable error code, one per cause; the HTTP status follows from it.\n\n' +
    errorCodes.map((code) => `- \`${code}\` (${errorCatalog[code].status}): ${errorCatalog[code].message}.`).join('\n')
})

/** The one error body of the API. */
export const ErrorBody = Type.Object({
  success: Type.Literal(false),
  message: Type.String({ description: 'Human-readable; may change. Branch on `code`.' }),
  code: ref(ErrorCodeSchema)
}, { $id: 'Error', description: 'The body of every error answer.' })

/**
 * The error body narrowed to the codes one operation sends with one status: the named
 * `Error` schema, with `code` restricted to that list.
 */
function errorAnswer (codes: readonly ErrorCode[]): TSchema {
  const first = codes[0] as ErrorCode
  return Type.Intersect([
    ref(ErrorBody),
    Type.Object({ code: Type.Unsafe<ErrorCode>({ type: 'string', enum: [...codes] }) })
  ], {
    description: codes.map((code) => `\`${code}\`: ${errorCatalog[code].message}.`).join(' '),
    examples: [{ success: false, message: errorCatalog[first].message, code: first }]
  })
}

/** Response schemas for the given error codes, grouped by their HTTP status. */
export function errorResponses (codes: readonly ErrorCode[]): Record<number, TSchema> {
  const byStatus = new Map<number, ErrorCode[]>()
  // In the catalog's order, whatever the order of the list.
  for (const code of errorCodes.filter((code) => codes.includes(code))) {
    const status = errorCatalog[code].status
    byStatus.set(status, [...(byStatus.get(status) ?? []), code])
  }
  return Object.fromEntries([...byStatus].map(([status, group]) => [status, errorAnswer(group)]))
}

/**
 * The codes an error answer of the OpenAPI document lists (the enum that narrows `code`), or
 * null for an answer that is not an error body.
 */
export function documentedErrorCodes (mediaSchema: unknown): ErrorCode[] | null {
  const allOf = (mediaSchema as { allOf?: Array<{ $ref?: string, properties?: { code?: { enum?: ErrorCode[] } } }> } | undefined)?.allOf
  if (allOf?.[0]?.$ref !== `#/components/schemas/${ErrorBody.$id as string}`) return null
  return allOf[1]?.properties?.code?.enum ?? null
}

/** A malformed percent-encoding in the path answers this before any route is chosen. */
export const urlErrors: readonly ErrorCode[] = ['INVALID_URL']

/**
 * Answers any route can give before it is chosen: the connection's own (MALFORMED_REQUEST,
 * REQUEST_TIMEOUT, HEADERS_TOO_LARGE, written by the client error handler), an unreadable
 * X-Forwarded-For from a trusted proxy, a header naming the caller sent twice, too many
 * connections from one source, and an Expect value other than 100-continue.
 */
export const connectionErrors: readonly ErrorCode[] = [...urlErrors, 'MALFORMED_REQUEST', 'REQUEST_TIMEOUT', 'HEADERS_TOO_LARGE', 'INVALID_FORWARDED_FOR', 'INVALID_WORKLOAD_IDENTITY', 'AMBIGUOUS_HEADER', 'RATE_LIMITED', 'EXPECTATION_FAILED']

/**
 * Answers any keyed route can give before its handler runs (connection, keys, sources,
 * outages). Every authenticated request counts against its caller's limits, refused or not,
 * so each can answer 429.
 */
export const commonErrors: readonly ErrorCode[] = [
  ...connectionErrors, 'UNAUTHORIZED', 'ORIGIN_NOT_ALLOWED', 'SECRET_KEY_IN_BROWSER', 'WORKLOAD_NOT_ALLOWED', 'SOURCE_BLOCKED',
  'INVALID_END_USER_IP', 'END_USER_IP_NOT_ALLOWED', 'END_USER_IP_REQUIRED', 'INTERNAL', 'UNAVAILABLE', 'TENANT_MISCONFIGURED'
]

/** Answers of a route whose body, query string or headers have a schema. */
export const inputErrors: readonly ErrorCode[] = ['INVALID_BODY']

/** Answers about the request body, on the routes that read one (GET bodies are never read). */
export const bodyErrors: readonly ErrorCode[] = [...inputErrors, 'INVALID_JSON', 'PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE']
