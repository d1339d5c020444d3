import { describeEmailRejection, validateEmail } from '../recipients/address.js'
import { tenantScope } from '../keys/scope.js'
import type { Tenant, TenantKey } from '../tenants/tenant.js'
import type { JwksType, ReceiptClaimsType } from '../../schemas/receipts.js'
import type { AddressHasher } from './address-hash.js'
import type { ReceiptIssuer } from './receipt-issuer.js'
import type { VerificationLog } from '../state/verification-log.js'
import type { RedemptionStore } from '../state/redemptions.js'

export type RedeemOutcome =
  | { ok: true, claims: ReceiptClaimsType }
  | { ok: false, refusal: 'invalid' | 'expired' | 'other_tenant' | 'invalid_email' | 'address_mismatch' | 'already_redeemed' | 'not_redeemable', detail?: string }

/** A redeemed receipt is remembered a little past its expiry, so clock skew cannot reopen it. */
const REDEMPTION_MARGIN_MS = 60_000

/**
 * Verification receipts: the address hash a dispatch stores with its code, the receipt a
 * successful verify answers, and the one redemption a tenant's backend makes of it.
 */
export class Receipts {
  readonly #issuer: ReceiptIssuer
  readonly #hasher: AddressHasher
  readonly #redemptions: RedemptionStore
  readonly #verifications: Pick<VerificationLog, 'record'> | null

  /** `verifications`: where a redemption is told to its verification's story (nowhere when not given). */
  constructor (issuer: ReceiptIssuer, hasher: AddressHasher, redemptions: RedemptionStore, verifications?: Pick<VerificationLog, 'record'>) {
    this.#issuer = issuer
    this.#hasher = hasher
    this.#redemptions = redemptions
    this.#verifications = verifications ?? null
  }

  get jwks (): JwksType {
    return this.#issuer.jwks
  }

  /** The tenant's keyed hash of the address a code is mailed to. */
  addressHash (tenant: Tenant, address: string): string {
    return this.#hasher.hash(tenant, address)
  }

  async issue (key: TenantKey, requestId: string, addressHash: string): Promise<string> {
    const epoch = await this.#redemptions.epoch(tenantScope(key.tenant.id, key.mode))
    return this.#issuer.issue({ tenant: key.tenant.id, mode: key.mode, requestId, addressHash, epoch })
  }

  /**
   * Checks a receipt for the redeeming key's tenant and mode (and, when given, the address the
   * backend's user claims), then marks it redeemed, if it was issued in the current epoch. A
   * refused receipt is not marked, so a backend that sent the wrong address can retry with the
   * right one.
   */
  async redeem (key: TenantKey, token: string, email: string | undefined, nowMs = Date.now()): Promise<RedeemOutcome> {
    const checked = await this.#issuer.check(token, nowMs)
    if (!checked.ok) return { ok: false, refusal: checked.reason }
    const { claims } = checked
    if (claims.tenant !== key.tenant.id || claims.mode !== key.mode) return { ok: false, refusal: 'other_tenant' }
    if (email !== undefined) {
      const address = validateEmail(email)
      if (!address.ok) return { ok: false, refusal: 'invalid_email', detail: describeEmailRejection(address.reason) }
      if (!this.#hasher.matches(key.tenant, address.email.address, claims.addressHash)) return { ok: false, refusal: 'address_mismatch' }
    }
    const ttlMs = Math.max(1, claims.exp * 1000 - nowMs) + REDEMPTION_MARGIN_MS
    switch (await this.#redemptions.redeem(tenantScope(claims.tenant, claims.mode), claims.jti, claims.epoch, ttlMs)) {
      case 'redeemed':
        this.#verifications?.record({ tenantId: claims.tenant, mode: claims.mode, requestId: claims.requestId }, { type: 'receipt_redeemed', at: new Date(nowMs).toISOString() })
        return { ok: true, claims }
      case 'already_redeemed': return { ok: false, refusal: 'already_redeemed' }
      case 'other_epoch': return { ok: false, refusal: 'not_redeemable' }
    }
  }
}
