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
  add (tenantId: string, message: SandboxMessage): Promise<void>
  /** Newest first, messages younger than the retention only. */
  list (tenantId: string, address: string): Promise<SandboxMessage[]>
}

export const SANDBOX_RETENTION_MS = 60 * 60 * 1000
/** Per address: enough for any test flow, small enough to bound memory. */
export const SANDBOX_MESSAGES_PER_ADDRESS = 20
/** Whether a message is younger than the retention: both inboxes list only those. */
export function isFresh (message: SandboxMessage, now: number): boolean {
  return Date.parse(message.createdAt) > now - SANDBOX_RETENTION_MS
}
