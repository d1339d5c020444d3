import type { KeyMode } from '../keys/api-keys.js'
import type { VerificationEvent, VerificationLog } from '../state/verification-log.js'

/**
 * Where a verification stands. `failed`: a guess that was not the code used it up (every verify
 * consumes the code); `locked`: that guess also locked the mailbox; `expired`: nothing happened
 * to the code before its lifetime ended.
 */
export type VerificationState = 'pending' | 'verified' | 'failed' | 'locked' | 'expired' | 'delivery_failed'

/** An event of the story as answered: the stored ones, and `expired` when the lifetime ran out unused. */
export type StoryEvent = VerificationEvent | { type: 'expired', at: string }

export interface VerificationStoryView {
  requestId: string
  mode: KeyMode
  state: VerificationState
  createdAt: string
  expiresAt: string
  wrongGuesses: number
  events: StoryEvent[]
  /** Events past the list's bound, counted but not listed. */
  eventsOmitted: number
}

/**
 * A verification's story as its tenant's backend reads it (GET /verifications/{requestId}),
 * from the log of the key's own tenant and mode only: another tenant's or mode's requestId is
 * as unknown as one never issued.
 */
export class VerificationStories {
  readonly #log: Pick<VerificationLog, 'read'>

  constructor (log: Pick<VerificationLog, 'read'>) {
    this.#log = log
  }

  async story (tenantId: string, mode: KeyMode, requestId: string, nowMs = Date.now()): Promise<VerificationStoryView | null> {
    const story = await this.#log.read({ tenantId, mode, requestId })
    const first = story?.events[0]
    if (story === undefined || story === null || first?.type !== 'requested') return null
    const { counts } = story
    const has = (type: VerificationEvent['type']): boolean => (counts[type] ?? 0) > 0
    const state: VerificationState = has('verified')
      ? 'verified'
      : has('locked')
        ? 'locked'
        : has('delivery_failed')
          ? 'delivery_failed'
          : has('wrong_guess')
            ? 'failed'
            : Date.parse(first.expiresAt) <= nowMs ? 'expired' : 'pending'
    const events: StoryEvent[] = [...story.events]
    if (state === 'expired') events.push({ type: 'expired', at: first.expiresAt })
    const counted = Object.values(counts).reduce((sum, count) => sum + count, 0)
    return {
      requestId,
      mode,
      state,
      createdAt: first.at,
      expiresAt: first.expiresAt,
      wrongGuesses: counts.wrong_guess ?? 0,
      events,
      eventsOmitted: counted - story.events.length
    }
  }
}
