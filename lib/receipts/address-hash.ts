import { createHmac, createSecretKey, hkdfSync, timingSafeEqual, type KeyObject } from 'node:crypto'
import type { MacKey } from '../keys/mac-key.js'
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
 * sets one, else under a key derived per tenant from each OTP HMAC key (so every instance
 * agrees, tenants never share a key, and a hash made before an HMAC key rotation still
 * checks while the old key is listed).
 */
export class AddressHasher {
  readonly #hmacSecrets: readonly Buffer[]
  /** Derived keys per tenant id, signing key first; as many entries as tenants. */
  readonly #derived = new Map<string, KeyObject[]>()

  constructor (hmacKeys: readonly MacKey[]) {
    this.#hmacSecrets = hmacKeys.map((key) => key.secret)
  }

  hash (tenant: Tenant, address: string): string {
    return addressHash(this.#keys(tenant)[0] as KeyObject, address)
  }

  /** Whether `hash` is this address's under any of the tenant's keys; constant time per key. */
  matches (tenant: Tenant, address: string, hash: string): boolean {
    const presented = Buffer.from(hash)
    let matched = false
    for (const key of this.#keys(tenant)) {
      const expected = Buffer.from(addressHash(key, address))
      if (expected.length === presented.length && timingSafeEqual(expected, presented)) matched = true
    }
    return matched
  }

  #keys (tenant: Tenant): KeyObject[] {
    if (tenant.addressHashKey !== null) return [tenant.addressHashKey]
    let keys = this.#derived.get(tenant.id)
    if (keys === undefined) {
      keys = this.#hmacSecrets.map((secret) => createSecretKey(Buffer.from(hkdfSync('sha256', secret, Buffer.alloc(0), `email-otp address hash key\0${tenant.id}`, 32))))
      this.#derived.set(tenant.id, keys)
    }
    return keys
  }
}
