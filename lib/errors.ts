import createError from '@fastify/error'
import { errorCatalog, errorCodes, type ErrorCode } from '../schemas/error-catalog.js'

/** An error that carries a stable code and maps to the contract's error body. */
export interface ApiError extends Error {
  code: ErrorCode
  statusCode: number
  /** Extra response headers (Retry-After, Quota-*). */
  headers?: Record<string, string>
  /** Already counted against the caller's velocity limits by the step that refused it. */
  counted?: boolean
  /** A 5xx the route accounted for in its own log (or on purpose not): no `request failed` line. */
  logged?: boolean
}

// Expected outcomes (a wrong code, a limit) are not bugs: no stack trace is captured, which
// keeps the hot rejection paths cheap.
const factories = Object.fromEntries(
  errorCodes.map((code) => [code, createError(code, '%s', errorCatalog[code].status, Error, false)])
) as Record<ErrorCode, ReturnType<typeof createError>>

export function isApiError (error: unknown): error is ApiError {
  const code = (error as { code?: unknown } | null)?.code
  return error instanceof Error && typeof code === 'string' && Object.hasOwn(errorCatalog, code)
}

/** Builds the error for a code, optionally with a more precise message and extra headers. */
export function apiError (code: ErrorCode, detail?: string, headers?: Record<string, string>): ApiError {
  const error = new factories[code](detail ?? errorCatalog[code].message) as ApiError
  if (headers !== undefined) error.headers = headers
  return error
}
