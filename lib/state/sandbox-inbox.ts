import type { BodyPieces } from '../code-pieces.js'

/** A message a sandbox key "sent": kept for the tenant's own tests, never delivered. */
export interface SandboxMessage {
  requestId: string
  to: string
  from: string
  subject: string
  text: string
  html: string
  /** The plaintext code, so partners' tests can complete the flow. Sandbox only. */
  code: string
  createdAt: string
}

export interface SandboxInbox {
  /** `pieces`: the message's text and HTML as a tenant's template rendered them, when it did. */
  add (tenantId: string, message: SandboxMessage, pieces?: BodyPieces): Promise<void>
  /** Newest first, messages younger than the retention only. */
  list (tenantId: string, address: string): Promise<SandboxMessage[]>
}

export const SANDBOX_RETENTION_MS = 60 * 60 * 1000
/** Per address: enough for any test flow, small enough to bound memory. */
export const SANDBOX_MESSAGES_PER_ADDRESS = 20
/**
 * Addresses whose messages one tenant keeps, in either store: past it (or past
 * SANDBOX_SIZE_PER_TENANT), that tenant's least recently written box goes, never another
 * tenant's (sandbox keys can be public, the demo key is), and never the box just written.
 */
export const SANDBOX_ADDRESSES_PER_TENANT = 1000
/**
 * What one tenant's messages may take: characters in process, bytes of the stored entries on
 * Redis. A tenant's own templates can make a message about 330,000 characters (a 64 KiB text
 * part and a 256 KiB HTML part), so the count of addresses alone would let one tenant hold
 * several GB; 32 Mi keep about a hundred of the largest messages (fewer on Redis when they are
 * not ASCII, which UTF-8 stores in up to 3 bytes a character) and thousands of ordinary ones.
 */
export const SANDBOX_SIZE_PER_TENANT = 32 * 1024 * 1024
/** Whether a message is younger than the retention: both inboxes list only those. */
export function isFresh (message: SandboxMessage, now: number): boolean {
  return Date.parse(message.createdAt) > now - SANDBOX_RETENTION_MS
}
