import { randomUUID } from 'node:crypto'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import { finished } from 'node:stream/promises'
import fp from 'fastify-plugin'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, preHandlerAsyncHookHandler } from 'fastify'
import { apiError, isApiError, type ApiError } from '../lib/errors.js'
import { CONTINUE_EXPECTATION } from './connections.js'
import { errorCatalog, type ErrorCode } from '../schemas/error-catalog.js'
import { StoreFullError, StoreUnavailableError } from '../lib/store-errors.js'
import { perSource } from './external/rate-limit.js'

// Fastify's own errors (body parsing, limits) mapped to the contract's codes.
const fastifyCodes: Record<string, ErrorCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'UNSUPPORTED_MEDIA_TYPE',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'INVALID_BODY',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'INVALID_BODY',
  FST_ERR_CTP_INVALID_JSON_BODY: 'INVALID_JSON'
}

/**
 * An over-limit body declared at most this long is read to its end and dropped before the 413,
 * so that the connection stays open: a client that sends one oversized request among good ones
 * (or a flood of them) then costs no new connection per answer. Reading it takes no longer than
 * REQUEST_TIMEOUT_MS, as for any body under the limit; a longer or undeclared body closes the
 * connection at once, unread.
 */
export const DRAIN_LIMIT_BYTES = 64 * 1024

/**
 * Fastify closes the connection after any body-parsing error, since the client may still be
 * sending. Once the request has been read to its end (malformed JSON, an oversized body
 * drained above) the connection is in step and can serve the next request.
 */
async function keepConnectionIfRead (request: FastifyRequest, reply: FastifyReply, error: ApiError): Promise<void> {
  const raw = request.raw
  if (!raw.complete && error.code === 'PAYLOAD_TOO_LARGE') {
    // Not invited to send it (plugins/connections.ts): the client may never do so.
    if (CONTINUE_EXPECTATION.test(raw.headers.expect ?? '')) return
    const declared = Number(raw.headers['content-length'])
    if (!Number.isSafeInteger(declared) || declared > DRAIN_LIMIT_BYTES) return
    raw.resume()
    // A client that never finishes is closed by REQUEST_TIMEOUT_MS (answered 408).
    await finished(raw).catch(() => {})
  }
  if (raw.complete) reply.removeHeader('connection')
}

/** Connections answered by answerClientError: their request, if one had begun, gets no other answer. */
const answeredOnConnection = new WeakSet<Socket>()

function send (reply: FastifyReply, error: ApiError): FastifyReply {
  if (error.headers !== undefined) reply.headers(error.headers)
  return reply.code(error.statusCode).send({ success: false, message: error.message, code: error.code })
}

/** Turns any error into the contract's body; 5xx details stay in the log, never in the answer. */
export function toApiError (error: FastifyError | Error): ApiError {
  if (isApiError(error)) return error
  if (error instanceof StoreUnavailableError) return apiError('UNAVAILABLE', 'The token store is unavailable; retry later', { 'retry-after': '1' })
  if (error instanceof StoreFullError) return apiError('UNAVAILABLE', error.answer, { 'retry-after': '5' })
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

/**
 * Answers every error of an instance in the contract's shape: the error handler, the 404
 * handler, and 405 with `Allow` for a known path asked with another method. Routes take the
 * error handler in force when they are registered, so this runs before any route is added.
 */
export function answerErrorsInContractShape (fastify: FastifyInstance, countError: (code: ErrorCode) => void = () => {}, notFoundPreHandler?: preHandlerAsyncHookHandler): void {
  const answer = (error: FastifyError, request: FastifyRequest, reply: FastifyReply, mapped: ApiError): FastifyReply => {
    // A body cut short by REQUEST_TIMEOUT_MS fails its parser too, after the connection was
    // answered 408: that answer was counted and logged, this one never reaches anybody.
    if (!answeredOnConnection.has(request.raw.socket)) {
      countError(mapped.code)
      if (mapped.statusCode >= 500) {
        if (mapped.logged !== true) request.log.error({ err: error }, 'request failed')
      } else if (mapped.code === 'INVALID_BODY' || mapped.code === 'INVALID_JSON') {
        request.log.info({ code: mapped.code }, 'request rejected')
      }
    }
    return send(reply, mapped)
  }
  // Synchronous unless the connection must be brought back in step first: an async handler
  // costs every refusal a promise and a turn of the microtask queue. That promise resolves to
  // the reply: Fastify sends whatever else it resolves to again, and an answer
  // plugins/refusal-pacing.ts holds would then go twice.
  fastify.setErrorHandler(function rootErrorHandler (error: FastifyError, request, reply): Promise<FastifyReply> | undefined {
    const mapped = toApiError(error)
    if (reply.getHeader('connection') === 'close') {
      return keepConnectionIfRead(request, reply, mapped).then(() => answer(error, request, reply, mapped))
    }
    answer(error, request, reply, mapped)
    return undefined
  })

  // The methods of each fixed path (wildcard routes such as /docs/* and CORS's OPTIONS * are
  // left out: they answer every path under them).
  const methodsByPath = new Map<string, Set<string>>()
  fastify.addHook('onRoute', (route) => {
    if (route.url.includes('*') || route.url.includes(':')) return
    const methods = methodsByPath.get(route.url) ?? new Set<string>()
    for (const method of Array.isArray(route.method) ? route.method : [route.method]) methods.add(method)
    methodsByPath.set(route.url, methods)
  })
  const allowHeaders = new Map<string, string>()
  const allowHeaderOf = (path: string): string | null => {
    const known = allowHeaders.get(path)
    if (known !== undefined) return known
    const methods = methodsByPath.get(path)
    if (methods === undefined) return null
    // Every known path answers OPTIONS: a CORS preflight, or 204 with this header.
    const header = [...new Set([...methods, 'OPTIONS'])].join(', ')
    allowHeaders.set(path, header)
    return header
  }

  fastify.setNotFoundHandler(notFoundPreHandler === undefined ? {} : { preHandler: notFoundPreHandler }, function notFound (request: FastifyRequest, reply) {
    const path = request.url.split('?')[0] ?? ''
    const allow = allowHeaderOf(path)
    if (allow === null) {
      countError('NOT_FOUND')
      return send(reply, apiError('NOT_FOUND', `No route for ${request.method} ${path.slice(0, 200)}`))
    }
    reply.header('allow', allow)
    // An OPTIONS that is not a CORS preflight asks what the path supports.
    if (request.method === 'OPTIONS') return reply.code(204).send()
    countError('METHOD_NOT_ALLOWED')
    return send(reply, apiError('METHOD_NOT_ALLOWED', `${request.method} is not allowed on ${path}; allowed: ${allow}`))
  })
}

/** What a client error on the raw connection means, in the catalog's words. */
function clientErrorCode (error: NodeJS.ErrnoException): ErrorCode {
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') return 'REQUEST_TIMEOUT'
  if (error.code === 'HPE_HEADER_OVERFLOW') return 'HEADERS_TOO_LARGE'
  return 'MALFORMED_REQUEST'
}

/**
 * Fastify's `clientErrorHandler`: errors node raises on the connection itself, before or while
 * a request is read (malformed HTTP, headers over the size limit, a request that did not
 * arrive within REQUEST_TIMEOUT_MS). They never reach the error handler; this answers them in
 * the contract's shape and closes the connection. Called with the Fastify instance as `this`.
 */
export function answerClientError (this: FastifyInstance, error: NodeJS.ErrnoException, socket: Socket): void {
  // A reset connection has nobody to answer.
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  const code = clientErrorCode(error)
  answeredOnConnection.add(socket)
  // No request was read, so none has an id: this answer gets its own, as every answer does.
  const requestId = randomUUID()
  this.log.debug({ reqId: requestId, code, reason: error.code }, 'connection closed on a client error')
  if (this.hasDecorator('metrics')) this.metrics.errors.inc({ code })
  // As node does on its own: no answer once a response has started on this connection (it
  // would land inside it).
  const response = (socket as Socket & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage
  if (socket.writable && response?.headersSent !== true) {
    const { status, message } = errorCatalog[code]
    const body = JSON.stringify({ success: false, message, code })
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n${body}`)
  }
  socket.destroy(error)
}

/**
 * Fastify's `frameworkErrors`: errors Fastify raises before routing (a malformed
 * percent-encoding in the path) never reach the error handler.
 */
export function answerFrameworkError (_error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  // Before routing, so before the hook that sets it on every other answer.
  reply.header('x-request-id', request.id)
  void send(reply, apiError('INVALID_URL'))
}

export default fp(async function errorsPlugin (fastify) {
  // Scanners probing unknown paths are slowed down like any public caller.
  answerErrorsInContractShape(fastify, (code) => { fastify.metrics.errors.inc({ code }) }, fastify.rateLimit(perSource(fastify.config.routeLimits.public)))
}, { name: 'errors', dependencies: ['config', 'metrics', 'rate-limit'], fastify: '5.x' })
