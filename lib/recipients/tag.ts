import { createHmac, createSecretKey, type KeyObject } from 'node:crypto'

/** Enough to keep recipients apart: two collide in a tenant's limits only past ~2^48 of them. */
export const TAG_BYTES = 12

/**
 * What identifies a recipient tag key without revealing it: an HMAC of a fixed label under the
 * key (nothing from which the key could be derived). Kept in Redis so that an instance whose
 * key differs from the one the data was written under is refused rather than silently lifting
 * every suppression (lib/state/redis/tag-key-fingerprint.ts).
 */
export function tagKeyFingerprint (secret: Buffer): string {
  return createHmac('sha256', secret).update('recipient tag key fingerprint\0').digest().toString('base64url', 0, TAG_BYTES)
}

/**
 * The keyed, non-reversible tag of a recipient mailbox: what its suppression, its lockouts and
 * its recipient buckets are named by, so that stores never hold an address. Keyed by
 * RECIPIENT_TAG_KEY, apart from the keys that sign codes: those rotate, and a mailbox's tag
 * must not, or a rotation would lift every suppression and restart every lockout and count.
 */
export class RecipientTagger {
  readonly #key: KeyObject

  constructor (secret: Buffer) {
    // A KeyObject made once: on Node 24 createHmac with a Buffer key builds one per call.
    this.#key = createSecretKey(secret)
  }

  /** The tag of a mailbox's canonical form (lib/recipients/mailbox.ts). */
  tag (canonical: string): string {
    return createHmac('sha256', this.#key).update('recipient\0').update(canonical).digest().toString('base64url', 0, TAG_BYTES)
  }
}
