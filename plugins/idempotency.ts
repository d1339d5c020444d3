import { createHash, randomBytes } from 'node:crypto'
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
    /** The Idempotency-Key this request claimed; null without one (or once its answer is recorded). */
    idempotency: IdempotentAttempt | null
  }
}

/** A request's claim on its Idempotency-Key. */
export interface IdempotentAttempt {
  scope: string
  key: string
  fingerprint: string
  /** This attempt's own id: it acts on its claim only. */
  attempt: string
  /**
   * Awaited right before the message is handed to the mailer: from then on the key never runs
   * again within its window, whatever becomes of this request. Rejects (503 when the store
   * cannot record it, 409 when the key is no longer this request's) and then nothing may be
   * sent.
   */
  beforeSend: () => Promise<void>
}

const REPLAY_TTL_MS = 24 * 60 * 60 * 1000
// Longer than any dispatch can take (mail timeout included): a claim older than this belongs
// to an instance that died or lost its store mid-request. A retry may take the key over if that
// attempt never came to sending; if it did, the retry hears that the outcome is unknown.
const CLAIM_MS = 60 * 1000
const KEY_FORMAT = /^[\x21-\x7e]{1,255}$/
// Headers worth replaying; the rest (dates, request ids, rate limits) describe the new exchange.
const REPLAYED_HEADERS = ['quota-limit', 'quota-remaining', 'quota-reset']

/**
 * The answers of attempts that sent nothing, whose key is released so that a retry really runs
 * again: refusals (which also keeps what one caller can store bounded by its velocity limits),
 * 502 (the provider did not take the message: the code is destroyed and nothing charged) and
 * 503 (the dispatch was undone). Only a 200 is kept for replay; any other answer (a 500) leaves
 * the claim as it is, closed to other attempts if it may have sent.
 */
function sentNothing (statusCode: number): boolean {
  return (statusCode > 200 && statusCode < 500) || statusCode === 502 || statusCode === 503
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
 * running gets 409 and should retry. A key whose first attempt may have sent and whose answer
 * could not be recorded (its store failed at the wrong moment) is never run again in its 24
 * hours: retries get 409 IDEMPOTENCY_OUTCOME_UNKNOWN until the answer is recorded, if ever.
 * Keys are scoped by API key (another key, the tenant's public one say, can neither replay nor
 * pre-empt them), and a restricted key's also by the end client's full address; stored answers never hold a code (dispatch answers carry only the requestId).
 */
export default fp(async function idempotencyPlugin (fastify) {
  const store = fastify.state.idempotency

  fastify.decorateRequest('idempotency', null)

  async function claimIdempotencyKey (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const header = request.headers['idempotency-key']
    if (header === undefined || request.auth === null) return
    if (typeof header !== 'string' || !KEY_FORMAT.test(header)) {
      throw apiError('INVALID_BODY', 'Idempotency-Key must be 1 to 255 printable ASCII characters')
    }
    // Through the mesh, only a gateway named in MESH_GATEWAY_IDENTITIES says which visitor a
    // request is for; a workload (an ingress not named as a gateway) or a caller without an
    // identity carries every visitor as one source, and one namespace for all of them would
    // give a stranger who repeats a visitor's guessable key that visitor's requestId.
    if (request.auth.kind === 'restricted' && request.meshSource !== null) throw apiError('IDEMPOTENCY_KEY_UNSCOPED')
    const keyScope = `${tenantScope(request.auth.tenant.id, request.auth.mode)}:${request.auth.id}`
    // A restricted key is shared by every visitor of its page: each visitor's address (a named
    // gateway's end client, through the mesh; canonical, so each spelling of it is one) gets
    // its own namespace, so a visitor's guessable key never gives a stranger that visitor's
    // record. The whole address, not the bucket the per-source limits count: a stranger in the
    // visitor's IPv6 /64 is another visitor. Whoever shares the address itself (a NAT) shares
    // the records; docs/security.md says so.
    const scope = request.auth.kind === 'restricted' ? `${keyScope}:${request.clientAddress}` : keyScope
    const fingerprint = createHash('sha256').update(`${request.method} ${request.routeOptions.url ?? ''}\n${canonicalJson(request.body)}`).digest('base64url')
    const attempt = randomBytes(12).toString('base64url')
    const claim = await storeCall('idempotency store', async () => await store.begin(scope, header, fingerprint, attempt, REPLAY_TTL_MS, CLAIM_MS))
    if (claim.state === 'mismatch') throw apiError('IDEMPOTENCY_MISMATCH')
    if (claim.state === 'in_flight') throw apiError('IDEMPOTENCY_IN_FLIGHT', undefined, { 'retry-after': '1' })
    if (claim.state === 'unknown') throw apiError('IDEMPOTENCY_OUTCOME_UNKNOWN')
    if (claim.state === 'replay') {
      return await reply.code(claim.response.statusCode)
        .headers({ ...claim.response.headers, 'idempotent-replayed': 'true', 'content-type': 'application/json; charset=utf-8' })
        .send(claim.response.body)
    }
    request.idempotency = {
      scope,
      key: header,
      fingerprint,
      attempt,
      async beforeSend () {
        const marked = await storeCall('idempotency store', async () => await store.sending(scope, header, attempt))
        // Our claim lapsed and another attempt holds the key: it is that one's to send.
        if (!marked) throw apiError('IDEMPOTENCY_IN_FLIGHT', undefined, { 'retry-after': '1' })
      }
    }
  }

  async function recordIdempotentAnswer (request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> {
    const claim = request.idempotency
    if (claim === null) return payload
    request.idempotency = null
    // The answer itself is right whatever the store does with it.
    if (reply.statusCode === 200 && typeof payload === 'string') {
      const headers: Record<string, string> = {}
      for (const name of REPLAYED_HEADERS) {
        const value = reply.getHeader(name)
        if (value !== undefined) headers[name] = String(value)
      }
      await store.complete(claim.scope, claim.key, claim.fingerprint, claim.attempt, { statusCode: reply.statusCode, body: payload, headers }, REPLAY_TTL_MS).catch((error: unknown) => {
        // It may still land when the store recovers; until then retries hear 409.
        request.log.warn({ err: error }, 'could not record the idempotent answer: the key does not run again, retries hear 409 until the answer lands')
      })
    } else if (sentNothing(reply.statusCode)) {
      await store.abandon(claim.scope, claim.key, claim.attempt).catch((error: unknown) => {
        request.log.warn({ err: error }, 'could not release the Idempotency-Key: a retry runs once its claim lapses, or hears 409 IDEMPOTENCY_OUTCOME_UNKNOWN if the dispatch came to sending')
      })
    } else {
      request.log.warn({ statusCode: reply.statusCode }, 'idempotent answer neither recorded nor released: its key stays claimed (409 IDEMPOTENCY_OUTCOME_UNKNOWN once the claim lapses, if it may have sent)')
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
