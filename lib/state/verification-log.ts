import type { KeyMode } from '../keys/api-keys.js'

/** Where one verification's story is kept: its tenant, the mode of the key that asked, its requestId. */
export interface VerificationId {
  tenantId: string
  mode: KeyMode
  requestId: string
}

/**
 * What happened to a verification, in the words of the `delivery.*` and `verification.*`
 * webhooks (schemas/webhooks.ts). Times are ISO 8601; nothing here carries the address, the
 * code or a guess.
 */
export type VerificationEvent =
  | { type: 'requested', at: string, keyId: string, expiresAt: string }
  | { type: 'sent', at: string, provider: string, messageId?: string }
  | { type: 'delivery_failed', at: string, reason: string }
  | { type: 'delivered' | 'delayed' | 'complained', at: string }
  | { type: 'bounced', at: string, bounceType: 'permanent' | 'transient' }
  | { type: 'wrong_guess', at: string, reason: 'wrong_code' | 'malformed_code' }
  | { type: 'locked', at: string }
  | { type: 'verified', at: string }
  | { type: 'receipt_redeemed', at: string }

export type VerificationEventType = VerificationEvent['type']

/** A verification's story: its events in order (the first MAX_EVENTS of them) and how many of each type there were. */
export interface VerificationStory {
  events: VerificationEvent[]
  counts: Partial<Record<VerificationEventType, number>>
}

/** Events kept per verification; past them only the counts grow (feedback may repeat: SES retries, several delays). */
export const MAX_EVENTS = 32

export interface VerificationLogLimits {
  /** How long a verification's story is kept after it was requested. */
  retentionMs: number
  /** Stories kept per tenant and mode; past it the least recently requested is forgotten. */
  maxPerScope: number
}

/**
 * The story of each verification, for its tenant's backend (GET /verifications/{requestId}).
 * Observational: `record` never throws and is never awaited by a dispatch or a verify, and a
 * write that fails loses that event, never the answer. A story starts with `requested`; any
 * other event of a requestId with no story (never requested, forgotten, another tenant's or
 * mode's) is dropped, so guesses at random requestIds store nothing. Both implementations pass
 * test/lib/state/verification-log.test.ts.
 */
export interface VerificationLog {
  record (id: VerificationId, event: VerificationEvent): void
  /** The story, or null when none is kept (unknown, past retention, forgotten for the cap). */
  read (id: VerificationId): Promise<VerificationStory | null>
  /** Resolves once every event recorded so far was written (or given up). */
  flush (): Promise<void>
  /** Events dropped without being written: the in-process buffer full, or a write that failed. */
  dropped (): number
  close (): Promise<void>
}

/** The story a new `requested` event starts. */
export function newStory (event: VerificationEvent): VerificationStory {
  return { events: [event], counts: { [event.type]: 1 } }
}

/** One more event of a story: counted always, listed while there is room. */
export function appendEvent (story: VerificationStory, event: VerificationEvent): void {
  story.counts[event.type] = (story.counts[event.type] ?? 0) + 1
  if (story.events.length < MAX_EVENTS) story.events.push(event)
}
