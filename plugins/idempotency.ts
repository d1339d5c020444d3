import { createHash } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { apiError } from '../lib/errors.js'
import { storeCall } from '../lib/store-errors.js'
import { tenantScope } from '../lib/keys/scope.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route honours the Idempotency-Key header. */
    idempotent?: boolean
  }
  interface FastifyRequest {
    idempotency: { scope: string, key: string, fingerprint: string } | null
  }
}

const REPLAY_TTL_MS = 24 * 60 * 60 * 1000
// Longer than any dispatch can take (mail timeout included): a claim older than this belongs
// to an instance that died mid-request, and a retry may take the key over.
const CLAIM_MS = 60 * 1000
const KEY_FORMAT = /^[\x21-\x7e]{1,255}$/
// Headers worth replaying; the rest (dates, request ids, rate limits) describe the new exchange.
const REPLAYED_HEADERS = ['quota-limit', 'quota-remaining', 'quota-reset']

/**
 * Answers kept for replay: those of admitted dispatches, the sent (200) and the undelivered
 * (502, whose unit was given back). A refusal keeps nothing, so what one caller can store is
 * bounded by its velocity limits, and a retry of a refused request really runs again.
 */
function isAdmitted (statusCode: number): boolean {
  return statusCode === 200 || statusCode === 502
}

function toArray<T> (value: T | T[] | undefined): T[] {
  return value === undefined ? [] : Array.isArray(value) ? value : [value]
}

function canonicalJson (value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (value !== null && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`).join(',')}}`
  }
  return JSON.stringify(value)
}

/**
 * Stripe's Idempotency-Key semantics for routes with `config.idempotent`: the same key and
 * body within 24 hours gets the first answer again (no second mail, no second charge); the
 * same key with another body gets 422; a duplicate that arrives while the first is still
 * running gets 409 and should retry. Keys are scoped by API key (another key, the tenant's
 * public one say, can neither replay nor pre-empt them); stored answers never hold a code
 * (dispatch answers carry only the requestId).
 */
export default fp(async function idempotencyPlugin (fastify) {
  const store = fastify.backend.idempotency

  fastify.decorateRequest('idempotency', null)

  async function claimIdempotencyKey (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const header = request.headers['idempotency-key']
    if (header === undefined || request.auth === null) return
    if (typeof header !== 'string' || !KEY_FORMAT.test(header)) {
      throw apiError('INVALID_BODY', 'Idempotency-Key must be 1 to 255 printable ASCII characters')
    }
    const scope = `${tenantScope(request.auth.tenant.id, request.auth.mode)}:${request.auth.id}`
    const fingerprint = createHash('sha256').update(`${request.method} ${request.routeOptions.url ?? ''}\n${canonicalJson(request.body)}`).digest('base64url')
    const claim = await storeCall('idempotency store', async () => await store.begin(scope, header, fingerprint, REPLAY_TTL_MS, CLAIM_MS))
    if (claim.state === 'mismatch') throw apiError('IDEMPOTENCY_MISMATCH')
    if (claim.state === 'in_flight') throw apiError('IDEMPOTENCY_IN_FLIGHT', undefined, { 'retry-after': '1' })
    if (claim.state === 'replay') {
      return await reply.code(claim.response.statusCode)
        .headers({ ...claim.response.headers, 'idempotent-replayed': 'true', 'content-type': 'application/json; charset=utf-8' })
        .send(claim.response.body)
    }
    request.idempotency = { scope, key: header, fingerprint }
  }

  async function recordIdempotentAnswer (request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> {
    const claim = request.idempotency
    if (claim === null) return payload
    request.idempotency = null
    try {
      if (isAdmitted(reply.statusCode) && typeof payload === 'string') {
        const headers: Record<string, string> = {}
        for (const name of REPLAYED_HEADERS) {
          const value = reply.getHeader(name)
          if (value !== undefined) headers[name] = String(value)
        }
        await store.complete(claim.scope, claim.key, claim.fingerprint, { statusCode: reply.statusCode, body: payload, headers }, REPLAY_TTL_MS)
      } else {
        await store.abandon(claim.scope, claim.key)
      }
    } catch (error) {
      // The answer itself is right; only its replay is lost, and the claim lapses by itself.
      request.log.warn({ err: error }, 'could not record the idempotent answer')
    }
    return payload
  }

  // Hooks on the routes that ask for them only, so other routes pay nothing.
  fastify.addHook('onRoute', (route) => {
    if (route.config?.idempotent !== true) return
    route.preHandler = [...toArray(route.preHandler), claimIdempotencyKey]
    route.onSend = [...toArray(route.onSend), recordIdempotentAnswer]
  })
}, { name: 'idempotency', dependencies: ['config', 'services'], fastify: '5.x' })
