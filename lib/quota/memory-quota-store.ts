import { assertLimit, assertScope, type QuotaDecision, type QuotaStore, type QuotaUsage } from './quota-store.js'
import { currentWindow, type QuotaWindow } from './window.js'

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

  async reserve (scope: string, limit: number, window: QuotaWindow, nowMs: number): Promise<QuotaDecision> {
    assertScope(scope)
    assertLimit(limit)
    const { id, resetMs } = currentWindow(window, nowMs)
    this.#sweep(nowMs)
    const key = counterKey(scope, id)
    const counter = this.#counters.get(key)
    const used = counter?.used ?? 0
    // A refused reservation leaves the count alone, so a tenant hammering past its limit does
    // not push the count (and the reported usage) beyond it.
    if (used >= limit) return { allowed: false, used, remaining: 0, resetMs, windowId: id }
    if (counter === undefined) this.#counters.set(key, { used: 1, resetMs })
    else counter.used = used + 1
    return { allowed: true, used: used + 1, remaining: limit - used - 1, resetMs, windowId: id }
  }

  async refund (scope: string, windowId: string): Promise<void> {
    assertScope(scope)
    const counter = this.#counters.get(counterKey(scope, windowId))
    if (counter !== undefined && counter.used > 0) counter.used -= 1
  }

  async usage (scope: string, window: QuotaWindow, nowMs: number): Promise<QuotaUsage> {
    assertScope(scope)
    const { id, resetMs } = currentWindow(window, nowMs)
    return { used: this.#counters.get(counterKey(scope, id))?.used ?? 0, resetMs, windowId: id }
  }

  #sweep (nowMs: number): void {
    if (nowMs < this.#nextSweepMs) return
    this.#nextSweepMs = nowMs + SWEEP_EVERY_MS
    for (const [key, counter] of this.#counters) {
      if (counter.resetMs <= nowMs) this.#counters.delete(key)
    }
  }
}

/** Length-prefixed so no scope/window pair can collide with another whatever characters they hold. */
function counterKey (scope: string, windowId: string): string {
  return `${scope.length}:${scope}${windowId}`
}
