import { lockDurationMs, type LockoutPolicy, type LockoutState } from '../../limits/lockout-policy.js'
import { StoreFullError } from '../../store-errors.js'
import type { KeyMode } from '../../keys/api-keys.js'
import { tenantScope } from '../../keys/scope.js'

type StoredState = LockoutState & { forgetAtMs: number }

/** A mailbox's lockout state in one lane, as this process names it: `<tenant>:<mode>:<lane subject>`. */
export function lockoutKey (tenantId: string, mode: KeyMode, laneSubject: string): string {
  return `${tenantScope(tenantId, mode)}:${laneSubject}`
}

/**
 * The share a lockout state belongs to: its tenant, mode and lane (the key up to its last `:`,
 * since neither tenant ids nor recipient tags hold one, and a lane subject is the bare tag or
 * `browser:<tag>`).
 */
export function lockoutShare (key: string): string {
  return key.slice(0, key.lastIndexOf(':'))
}

/** A share whose states are all live is scanned for forgotten ones at most this often. */
const FULL_SHARE_SWEEP_MS = 1000

export interface MemoryLockoutOptions {
  /** The most mailboxes one share keeps a state for. */
  statesPerShare: number
  /** The share a lockout key belongs to (lockoutShare: its tenant, mode and lane); one share by default. */
  shareOf?: (key: string) => string
}

/**
 * The in-process twin of LOCKOUT_LUA, for the embedded default. States live in shares of
 * `statesPerShare`, and a live state is never forgotten to make room: forgetting a run would
 * hand its attacker fresh guesses. A full share takes no new mailbox until some of its states
 * are forgotten (`hasRoom` says so beforehand, and the caller refuses the request); other
 * shares are not affected.
 */
export class MemoryLockout {
  readonly #statesPerShare: number
  readonly #shareOf: (key: string) => string
  readonly #shares = new Map<string, { states: Map<string, StoredState>, nextSweepMs: number }>()

  constructor (options: MemoryLockoutOptions) {
    this.#statesPerShare = options.statesPerShare
    this.#shareOf = options.shareOf ?? (() => '')
  }

  /** Ms left on the mailbox's lock, 0 when it is not locked. */
  lockedFor (key: string, nowMs = Date.now()): number {
    const state = this.#current(key, nowMs)
    return state === undefined || state.lockedUntilMs <= nowMs ? 0 : state.lockedUntilMs - nowMs
  }

  /** Whether a failure can be recorded for the mailbox: it has a state, or its share has room for one. */
  hasRoom (key: string, nowMs = Date.now()): boolean {
    if (this.#current(key, nowMs) !== undefined) return true
    const share = this.#shares.get(this.#shareOf(key))
    if (share === undefined || share.states.size < this.#statesPerShare) return true
    if (nowMs < share.nextSweepMs) return false
    share.nextSweepMs = nowMs + FULL_SHARE_SWEEP_MS
    for (const [stateKey, state] of share.states) if (state.forgetAtMs <= nowMs) share.states.delete(stateKey)
    return share.states.size < this.#statesPerShare
  }

  /** One more failure; returns the ms of the lock it starts (0 when none). */
  recordFailure (key: string, policy: LockoutPolicy, nowMs = Date.now()): number {
    if (!this.hasRoom(key, nowMs)) throw new StoreFullError('lockout share', 'Too many recipients have recent wrong codes; retry later')
    const state = this.#current(key, nowMs) ?? { failures: 0, lockedUntilMs: 0, forgetAtMs: 0 }
    state.failures++
    const lockMs = lockDurationMs(policy, state.failures)
    if (lockMs > 0) state.lockedUntilMs = nowMs + lockMs
    state.forgetAtMs = nowMs + lockMs + policy.resetAfterMs
    this.#share(key).states.set(key, state)
    return lockMs
  }

  clear (key: string): boolean {
    const states = this.#shares.get(this.#shareOf(key))?.states
    return states?.delete(key) ?? false
  }

  #share (key: string): { states: Map<string, StoredState>, nextSweepMs: number } {
    const name = this.#shareOf(key)
    let share = this.#shares.get(name)
    if (share === undefined) {
      share = { states: new Map(), nextSweepMs: 0 }
      this.#shares.set(name, share)
    }
    return share
  }

  #current (key: string, nowMs: number): StoredState | undefined {
    const states = this.#shares.get(this.#shareOf(key))?.states
    const state = states?.get(key)
    if (state === undefined || state.forgetAtMs > nowMs) return state
    states?.delete(key)
    return undefined
  }
}
