import { createHmac, createSecretKey, hkdfSync, timingSafeEqual, type KeyObject } from 'node:crypto'
import type { Tenant } from '../tenants/tenant.js'

/** 128 bits: enough that two addresses of one tenant never share a hash, short in every record. */
export const ADDRESS_HASH_BYTES = 16

/**
 * The keyed hash that receipts and webhook events carry instead of the address: base64url of
 * the first 16 bytes of HMAC-SHA256(key, address lower-cased), the address being the one the
 * code was mailed to (domain in punycode). A backend holding the tenant's key computes the
 * same from the address its user claims; without the key the hash says nothing about it.
 */
export function addressHash (key: KeyObject, address: string): string {
  return createHmac('sha256', key).update(address.toLowerCase()).digest().toString('base64url', 0, ADDRESS_HASH_BYTES)
}

/**
 * Address hashes for every tenant: under the tenant's `addressHashKey` when the tenants file
 * sets one, else under a key derived per tenant from RECIPIENT_TAG_KEY (so every instance
 * agrees, tenants never share a key, and rotating the keys that sign codes leaves a tenant's
 * hashes, which its receipts and webhook events carry, as they were).
 */
export class AddressHasher {
  readonly #secret: Buffer
  /** Derived keys per tenant id; as many entries as tenants. */
  readonly #derived = new Map<string, KeyObject>()

  constructor (recipientTagKey: Buffer) {
    this.#secret = recipientTagKey
  }

  hash (tenant: Tenant, address: string): string {
    return addressHash(this.#key(tenant), address)
  }

  /** Whether `hash` is this address's under the tenant's key, in constant time. */
  matches (tenant: Tenant, address: string, hash: string): boolean {
    const presented = Buffer.from(hash)
    const expected = Buffer.from(addressHash(this.#key(tenant), address))
    return expected.length === presented.length && timingSafeEqual(expected, presented)
  }

  #key (tenant: Tenant): KeyObject {
    if (tenant.addressHashKey !== null) return tenant.addressHashKey
    let key = this.#derived.get(tenant.id)
    if (key === undefined) {
      // The derivation address hashes had under the signing HMAC key, so that RECIPIENT_TAG_KEY
      // set to that key's secret keeps every hash a tenant has seen.
      key = createSecretKey(Buffer.from(hkdfSync('sha256', this.#secret, Buffer.alloc(0), `email-otp address hash key\0${tenant.id}`, 32)))
      this.#derived.set(tenant.id, key)
    }
    return key
  }
}
