import { assertLimit, assertScope, type QuotaDecision, type QuotaStore, type QuotaUsage } from '../quota.js'
import { currentWindow, type QuotaWindow } from '../../limits/window.js'

interface Counter {
  used: number
  readonly resetMs: number
}

/** How often, in caller time, ended windows are dropped: a full scan, so not on every call. */
const SWEEP_EVERY_MS = 60_000

/**
 * Single-process quota store: correct only when one instance serves all traffic (development,
 * tests, single-node deployments). Atomic because each operation runs to completion without
 * awaiting. Counters of ended windows are dropped, so memory is bounded by the scopes active
 * within roughly a minute rather than by history.
 */
export class MemoryQuotaStore implements QuotaStore {
  readonly #counters = new Map<string, Counter>()
  #nextSweepMs = Number.NEGATIVE_INFINITY

  /** Live window counters (for metrics, and to show memory stays bounded). */
  get size (): number {
    return this.#counters.size
  }

  /**
   * A unit of every claim or of none, synchronously (so nothing can run in between): what an
   * admitted dispatch takes (lib/state/memory/admission.ts). The decision describes the first
   * claim's counter.
   */
  reserveAll (claims: ReadonlyArray<{ scope: string, share: string | null, limit: number, window: QuotaWindow }>, nowMs: number): QuotaDecision {
    this.#sweep(nowMs)
    const slots = claims.map(({ scope, share, limit, window }) => {
      assertScope(scope)
      assertLimit(limit)
      const { id, resetMs } = currentWindow(window, nowMs)
      const key = counterKey(scope, share, id)
      return { key, limit, resetMs, windowId: id, used: this.#counters.get(key)?.used ?? 0 }
    })
    const [first] = slots
    if (first === undefined) throw new RangeError('a reservation needs at least one claim')
    // A refused reservation leaves the counts alone, so a tenant hammering past its limit does
    // not push the count (and the reported usage) beyond it.
    if (slots.some((slot) => slot.used >= slot.limit)) {
      return { allowed: false, used: first.used, remaining: Math.max(0, first.limit - first.used), resetMs: first.resetMs, windowId: first.windowId }
    }
    for (const slot of slots) {
      const counter = this.#counters.get(slot.key)
      if (counter === undefined) this.#counters.set(slot.key, { used: 1, resetMs: slot.resetMs })
      else counter.used++
    }
    return { allowed: true, used: first.used + 1, remaining: first.limit - first.used - 1, resetMs: first.resetMs, windowId: first.windowId }
  }

  async refund (scope: string, windowId: string, share: string | null = null): Promise<void> {
    assertScope(scope)
    const counter = this.#counters.get(counterKey(scope, share, windowId))
    if (counter !== undefined && counter.used > 0) counter.used -= 1
  }

  async usage (scope: string, window: QuotaWindow, nowMs: number, share: string | null = null): Promise<QuotaUsage> {
    assertScope(scope)
    const { id, resetMs } = currentWindow(window, nowMs)
    return { used: this.#counters.get(counterKey(scope, share, id))?.used ?? 0, resetMs, windowId: id }
  }

  #sweep (nowMs: number): void {
    if (nowMs < this.#nextSweepMs) return
    this.#nextSweepMs = nowMs + SWEEP_EVERY_MS
    for (const [key, counter] of this.#counters) {
      if (counter.resetMs <= nowMs) this.#counters.delete(key)
    }
  }
}

/** Length-prefixed so no scope/share/window triple can collide with another whatever characters they hold. */
function counterKey (scope: string, share: string | null, windowId: string): string {
  const shareId = share ?? ''
  return `${scope.length}:${scope}${shareId.length}:${shareId}${windowId}`
}
