import fp from 'fastify-plugin'
import type { FastifyError, FastifyReply } from 'fastify'
import { apiError, isApiError, type ApiError } from '../lib/errors.js'
import { errorCatalog, type ErrorCode } from '../schemas/error-catalog.js'
import { StoreFullError, StoreUnavailableError } from '../lib/store-errors.js'

// Fastify's own errors (body parsing, limits) mapped to the contract's codes.
const fastifyCodes: Record<string, ErrorCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'UNSUPPORTED_MEDIA_TYPE',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'INVALID_BODY',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'INVALID_BODY',
  FST_ERR_CTP_INVALID_JSON_BODY: 'INVALID_JSON'
}

function send (reply: FastifyReply, error: ApiError): FastifyReply {
  if (error.headers !== undefined) reply.headers(error.headers)
  return reply.code(error.statusCode).send({ success: false, message: error.message, code: error.code })
}

/** Turns any error into the contract's body; 5xx details stay in the log, never in the answer. */
export function toApiError (error: FastifyError | Error): ApiError {
  if (isApiError(error)) return error
  if (error instanceof StoreUnavailableError) return apiError('UNAVAILABLE', 'The token store is unavailable; retry later', { 'retry-after': '1' })
  if (error instanceof StoreFullError) return apiError('UNAVAILABLE', 'Too many codes are outstanding; retry later', { 'retry-after': '5' })
  const fastifyError = error as FastifyError
  if (fastifyError.validation !== undefined) return apiError('INVALID_BODY', describeValidation(fastifyError))
  const mapped = fastifyError.code === undefined ? undefined : fastifyCodes[fastifyError.code]
  if (mapped !== undefined) return apiError(mapped, mapped === 'INVALID_BODY' ? fastifyError.message : undefined)
  // JSON.parse failures (and prototype-poisoning refusals) arrive as 400 SyntaxErrors.
  if (error instanceof SyntaxError && fastifyError.statusCode === 400) return apiError('INVALID_JSON')
  if (fastifyError.statusCode !== undefined && fastifyError.statusCode >= 400 && fastifyError.statusCode < 500) {
    return apiError(fastifyError.statusCode === 404 ? 'NOT_FOUND' : 'INVALID_BODY', errorCatalog.INVALID_BODY.message)
  }
  return apiError('INTERNAL')
}

function describeValidation (error: FastifyError): string {
  const [first] = error.validation ?? []
  if (first === undefined) return errorCatalog.INVALID_BODY.message
  const where = error.validationContext ?? 'body'
  const params = first.params as Record<string, unknown>
  if (first.keyword === 'additionalProperties') return `${where}: unknown field "${String(params.additionalProperty)}"`
  if (first.keyword === 'required') return `${where}: missing required field "${String(params.missingProperty)}"`
  const field = first.instancePath.replace(/^\//, '').replaceAll('/', '.')
  return `${where}${field === '' ? '' : `.${field}`} ${first.message ?? 'is invalid'}`
}

export default fp(async function errorsPlugin (fastify) {
  fastify.setErrorHandler(function rootErrorHandler (error: FastifyError, request, reply) {
    const mapped = toApiError(error)
    fastify.metrics.errors.inc({ code: mapped.code })
    if (mapped.statusCode >= 500) {
      request.log.error({ err: error }, 'request failed')
    } else if (mapped.code === 'INVALID_BODY' || mapped.code === 'INVALID_JSON') {
      request.log.info({ code: mapped.code }, 'request rejected')
    }
    return send(reply, mapped)
  })
  fastify.setNotFoundHandler(function notFound (request, reply) {
    return send(reply, apiError('NOT_FOUND', `No route for ${request.method} ${(request.url.split('?')[0] ?? '').slice(0, 200)}`))
  })
}, { name: 'errors', dependencies: ['metrics'], fastify: '5.x' })
