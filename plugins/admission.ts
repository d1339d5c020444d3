import fp from 'fastify-plugin'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Admission } from '../lib/admission/admission.js'
import { MemoryAdmission } from '../lib/admission/memory-admission.js'
import { RedisAdmission } from '../lib/admission/redis-admission.js'
import { GUESS_FORMAT, MINT_ATTEMPTS, mintCode, storeKey, type IssuedCode, type TokenScope } from '../lib/otp/codes.js'
import type { TenantKey } from '../lib/tenants/registry.js'
import { reachedQuotaThresholds } from '../lib/webhooks/events.js'
import type { Reservation } from './tenant-quota.js'

export interface AdmittedDispatch extends IssuedCode {
  reservation: Reservation
}

export type GuessResult = 'verified' | 'mismatch' | 'malformed'

export interface GuessOutcome {
  result: GuessResult
  /** The recipient's address hash when the requestId had a code (right or wrong guess), else null. */
  addressHash: string | null
  /** Set when this wrong guess took the recipient's count to the lockout threshold: the lock's end, epoch ms. */
  lockedUntilMs: number | null
}

export interface AdmissionGate {
  /**
   * The recipient's lockout, the velocity limits, a unit of the tenant's allowance and the
   * new code's token, in one atomic step. Throws 429 (locked out, limited) or 402 (quota).
   */
  dispatch (request: FastifyRequest, reply: FastifyReply, key: TenantKey, recipientTag: string, addressHash: string, ttlMs: number): Promise<AdmittedDispatch>
  /**
   * The velocity limits, then the token's consumption whatever the guess (a code can be tried
   * once), the comparison and the recipient's wrong-guess count, in one atomic step. Throws 429.
   */
  verify (request: FastifyRequest, reply: FastifyReply, key: TenantKey, requestId: string, rawGuess: string): Promise<GuessOutcome>
}

declare module 'fastify' {
  interface FastifyInstance {
    admission: AdmissionGate
  }
}

/**
 * What a dispatch or verify must pass and change, decided in one step: on Redis one script,
 * one round trip, atomic across every instance (lib/admission/redis-admission.ts); in process
 * on the embedded default. The abuse guard names the counters and answers refusals, the quota
 * plugin does the same for the allowance.
 */
export default fp(async function admissionPlugin (fastify) {
  const { config, redis, abuseGuard, quota, tokenStore, codeSigner, webhooks } = fastify
  let admission: Admission
  if (redis === null) {
    const local = new MemoryAdmission(tokenStore, quota.store)
    fastify.addHook('onClose', async () => { local.close() })
    admission = local
  } else {
    admission = new RedisAdmission(redis)
  }
  const tokenScope = (key: TenantKey): TokenScope => ({ tenantId: key.tenant.id, mode: key.mode })

  const gate: AdmissionGate = {
    async dispatch (request, reply, key, recipientTag, addressHash, ttlMs) {
      const limits = abuseGuard.dispatchLimits(request, key, recipientTag)
      const lockout = { key: abuseGuard.lockoutKey(key, recipientTag), threshold: config.lockout.threshold }
      for (let attempt = 0; attempt < MINT_ATTEMPTS; attempt++) {
        const minted = mintCode(codeSigner, tokenScope(key), recipientTag, addressHash)
        const now = Date.now()
        const allowance = quota.allowance(key.tenant, key.mode, now)
        const verdict = await admission.dispatch({
          limits,
          lockout,
          quota: allowance,
          token: { key: minted.storeKey, record: minted.record, ttlMs }
        })
        if (verdict.kind === 'collision') continue
        abuseGuard.settle(reply, limits, verdict.counts, verdict.kind === 'locked' ? verdict.lockoutResetMs : null)
        if (verdict.kind === 'locked' || verdict.kind === 'limited') throw new Error(`the abuse guard let a ${verdict.kind} dispatch through`)
        const reservation = quota.settle(key.tenant, key.mode, verdict.quota, now)
        for (const threshold of reachedQuotaThresholds(verdict.quota.used, allowance.limit)) {
          webhooks.emit(key.tenant, key.mode, 'quota.threshold', {
            requestId: minted.requestId,
            threshold,
            limit: allowance.limit,
            used: verdict.quota.used,
            window: allowance.window.spec,
            resetsAt: new Date(verdict.quota.resetMs).toISOString()
          }, { key: `quota:${allowance.scope}:${verdict.quota.windowId}:${threshold}`, ttlMs: verdict.quota.resetMs - now })
        }
        return { requestId: minted.requestId, code: minted.code, storeKey: minted.storeKey, reservation }
      }
      throw new Error('could not allocate a unique requestId')
    },

    async verify (request, reply, key, requestId, rawGuess) {
      const guess = rawGuess.trim()
      const malformed = !GUESS_FORMAT.test(guess)
      // The same hashing for every guess, well-formed or not, stored or not: timing tells nothing.
      const storedForms = codeSigner.storedForms({ tenantId: key.tenant.id, mode: key.mode, requestId }, guess)
      const limits = abuseGuard.verifyLimits(request, key)
      const verdict = await admission.verify({
        limits,
        tokenKey: storeKey(tokenScope(key), requestId),
        storedForms: malformed ? [] : storedForms,
        lockout: { keyPrefix: abuseGuard.lockoutKeyPrefix(key), windowMs: config.lockout.windowMs }
      })
      abuseGuard.settle(reply, limits, verdict.counts, null)
      if (verdict.kind === 'limited') throw new Error('the abuse guard let a limited verify through')
      if (verdict.kind === 'missing') return { result: malformed ? 'malformed' : 'mismatch', addressHash: null, lockedUntilMs: null }
      if (verdict.kind === 'verified') {
        // A code stored before records carried the address hash cannot be given a receipt: it
        // fails like any code an upgrade leaves behind, and the user asks for a new one.
        return verdict.addressHash === null
          ? { result: 'mismatch', addressHash: null, lockedUntilMs: null }
          : { result: 'verified', addressHash: verdict.addressHash, lockedUntilMs: null }
      }
      const lockedNow = verdict.failures === config.lockout.threshold
      return { result: malformed ? 'malformed' : 'mismatch', addressHash: verdict.addressHash, lockedUntilMs: lockedNow ? Date.now() + verdict.lockoutResetMs : null }
    }
  }
  fastify.decorate('admission', gate)
}, { name: 'admission', dependencies: ['config', 'redis', 'abuse-guard', 'tenant-quota', 'token-store', 'webhooks'], fastify: '5.x' })
