import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { CaptchaVerifier } from '../lib/captcha/siteverify.js'
import { apiError, type ApiError } from '../lib/errors.js'
import { ShareLru } from '../lib/lru/share-lru.js'
import { sourceBucket } from '../lib/net/source-address.js'
import { callerOf } from './services.js'
import { tenantScope } from '../lib/keys/scope.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Keys whose tenant asks for it must present a CAPTCHA token on this route. */
    captcha?: boolean
  }
}

/** The header a page sends the widget's answer in (the token the provider's widget returns). */
const CAPTCHA_TOKEN = 'captcha-token'

/**
 * Callers remembered as past their limits, per instance and per tenant and mode: enough for a
 * flood from many sources, and a flood through one tenant's key never makes the process forget
 * another tenant's limited callers.
 */
const LIMITED_CALLERS_PER_TENANT = 10_000

function toArray<T> (value: T | T[] | undefined): T[] {
  return value === undefined ? [] : Array.isArray(value) ? value : [value]
}

/**
 * The CAPTCHA step of a dispatch, for keys whose tenant configures one (`captcha` in the
 * tenants file; restricted keys by default). It runs after the key, End-User-IP and block lists
 * are known and after an Idempotency-Key replay is answered (a retry does not need a new
 * token), before the recipient policy and admission: no code is minted and no unit charged
 * for a request without a solved challenge.
 *
 * Every refusal counts against the caller's velocity limits. A caller already past them gets
 * its 429 without a call to the provider, so a flood of made-up tokens costs the provider (and
 * the tenant's siteverify allowance) at most a limit's worth of calls per window and instance.
 * A provider that does not answer in time fails closed: 503, not a pass.
 */
export default fp(async function captchaPlugin (fastify) {
  const verifier = new CaptchaVerifier({ timeoutMs: fastify.config.captchaTimeoutMs })
  // Per tenant scope, caller (key and source bucket) → until when its last refusal said it was limited.
  const limitedUntil = new ShareLru<number>(LIMITED_CALLERS_PER_TENANT)

  async function checkCaptcha (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const key = request.auth
    // A replayed idempotent answer has been sent already.
    if (key === null || !key.captchaRequired || key.tenant.captcha === null || reply.sent) return
    const token = request.headers[CAPTCHA_TOKEN]
    if (token === undefined || token === '') throw apiError('CAPTCHA_REQUIRED')
    const caller = callerOf(request)
    const visitor = request.endUserAddress ?? request.clientAddress
    const share = tenantScope(key.tenant.id, key.mode)
    const limitKey = `${key.id}\u0000${sourceBucket(visitor, fastify.config.ipv6BucketPrefix) ?? visitor}`
    const now = Date.now()
    let counted = false
    if ((limitedUntil.get(share, limitKey) ?? 0) > now) {
      // Count before asking the provider: a caller still limited gets its 429 at no outside cost.
      const refusal = await fastify.otp.countRefused(caller, apiError('CAPTCHA_INVALID'))
      if (refusal.code === 'RATE_LIMITED') throw remember(refusal)
      limitedUntil.delete(share, limitKey)
      counted = true
    }
    const outcome = typeof token === 'string'
      ? await verifier.verify(key.tenant.captcha, token, visitor)
      : { result: 'invalid' as const, reasons: ['repeated-header'] }
    if (outcome.result === 'pass') return
    if (outcome.result === 'unavailable') {
      request.log.warn({ tenant: key.tenant.id, provider: key.tenant.captcha.provider, reason: outcome.reason }, 'CAPTCHA check unavailable')
      throw apiError('UNAVAILABLE', 'The CAPTCHA could not be checked; retry later', { 'retry-after': '5' })
    }
    request.log.info({ tenant: key.tenant.id, reasons: outcome.reasons }, 'CAPTCHA refused')
    if (counted) throw alreadyCounted(apiError('CAPTCHA_INVALID'))
    throw remember(await fastify.otp.countRefused(caller, apiError('CAPTCHA_INVALID')))

    function remember (refusal: ApiError): ApiError {
      if (refusal.code === 'RATE_LIMITED') {
        const retryAfter = Number.parseInt(String(refusal.headers?.['retry-after'] ?? '1'), 10)
        limitedUntil.set(share, limitKey, Date.now() + Math.max(1, retryAfter) * 1000)
      }
      return alreadyCounted(refusal)
    }
  }

  fastify.addHook('onRoute', (route) => {
    if (route.config?.captcha !== true) return
    route.preHandler = [...toArray(route.preHandler), checkCaptcha]
  })
}, { name: 'captcha', dependencies: ['config', 'services', 'idempotency', 'abuse-guard'], fastify: '5.x' })

function alreadyCounted (refusal: ApiError): ApiError {
  refusal.counted = true
  return refusal
}
