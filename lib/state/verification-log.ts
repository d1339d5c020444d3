import type { KeyMode } from '../keys/api-keys.js'
import type { Lane } from './admission.js'

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

/** The event that starts a story: its dispatch was admitted. */
export type RequestedEvent = Extract<VerificationEvent, { type: 'requested' }>
/** Any event after the first. */
export type LaterEvent = Exclude<VerificationEvent, RequestedEvent>

/** A verification's story: its listed events in order (LISTED_PER_TYPE) and how many of each type there were. */
export interface VerificationStory {
  events: VerificationEvent[]
  counts: Partial<Record<VerificationEventType, number>>
}

/**
 * Events listed per story of each type; past its bound a type is only counted. Two types repeat
 * without a bound of their own: a requestId may be guessed at again and again (`wrong_guess`),
 * and SES may report a delay at each of its retries (`delayed`). Every other type happens once
 * per verification (one dispatch, one send, one code to verify, one receipt to redeem, one SES
 * outcome); a repeat (SES sending a notification twice) is counted, so that none of them can
 * crowd out the others: a story's end is listed however often it was guessed at before.
 */
export const LISTED_PER_TYPE: Readonly<Record<VerificationEventType, number>> = {
  requested: 1,
  sent: 1,
  delivery_failed: 1,
  delivered: 1,
  delayed: 8,
  bounced: 1,
  complained: 1,
  wrong_guess: 24,
  locked: 1,
  verified: 1,
  receipt_redeemed: 1
}

/** The most events one story lists. */
export const MAX_LISTED = Object.values(LISTED_PER_TYPE).reduce((sum, listed) => sum + listed, 0)

export interface VerificationLogLimits {
  /** How long a verification's story is kept after it was requested. */
  retentionMs: number
  /**
   * Stories a tenant's backend dispatched (secret keys) kept per tenant and mode; past it the
   * least recently requested of them is forgotten. Its pages' dispatches (restricted keys, public)
   * keep at most browserStories(maxPerScope) more, forgetting only their own: a visitor with the
   * page's key cannot make the tenant forget what its backend dispatched.
   */
  maxPerScope: number
}

/** Stories a tenant's pages keep per tenant and mode, apart from its backend's: half as many, rounded up. */
export function browserStories (maxPerScope: number): number {
  return Math.ceil(maxPerScope / 2)
}

/**
 * The story of each verification, for its tenant's backend (GET /verifications/{requestId}).
 * Observational: `record` never throws and is never awaited by a dispatch or a verify, and a
 * write that fails loses that event, never the answer. A story starts with `requested`, in the
 * lane of the key that dispatched it; any later event of a requestId with no story (never
 * requested, forgotten, another tenant's or mode's) is dropped, so guesses at random requestIds
 * store nothing. Both implementations pass test/lib/state/verification-log.test.ts.
 */
export interface VerificationLog {
  /** Starts a story (once: a repeat of a requestId is dropped), counted against its lane's cap. */
  start (id: VerificationId, lane: Lane, event: RequestedEvent): void
  record (id: VerificationId, event: LaterEvent): void
  /** The story, or null when none is kept (unknown, past retention, forgotten for the cap). */
  read (id: VerificationId): Promise<VerificationStory | null>
  /** Resolves once every event recorded so far was written (or given up). */
  flush (): Promise<void>
  /** Events dropped without being written: the in-process buffer full, or a write that failed. */
  dropped (): number
  close (): Promise<void>
}

/** The story a `requested` event starts. */
export function newStory (event: RequestedEvent): VerificationStory {
  return { events: [event], counts: { requested: 1 } }
}

/** One more event of a story: counted always, listed while its type is within LISTED_PER_TYPE. */
export function appendEvent (story: VerificationStory, event: LaterEvent): void {
  const count = (story.counts[event.type] ?? 0) + 1
  story.counts[event.type] = count
  if (count <= LISTED_PER_TYPE[event.type]) story.events.push(event)
}
