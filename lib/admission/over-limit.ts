import type { LimitHit, WindowCount } from '../state/admission.js'

/** A limit gone past and its count, as the gate's Exceeded. */
interface Exceeded {
  limit: LimitHit
  count: WindowCount
}

/** How long a bucket seen over its limit is refused without asking the store again. */
export const OVER_LIMIT_MEMORY_MS = 250
/** Buckets remembered at once; past it a refusal is simply not remembered (the store still answers). */
export const OVER_LIMIT_MEMORY_ENTRIES = 10_000

interface Entry {
  /** Until when the bucket is refused from memory: the sooner of the memory's end and its window's. */
  untilMs: number
  /** The window's end, for Retry-After and RateLimit-Reset. */
  resetMs: number
}

/**
 * The caller's own buckets (its source, a forwarding backend's) that the shared store found
 * past their limit a moment ago. A flood from one source would otherwise cost a store round
 * trip per refusal, for an answer known in advance: a fixed window past its limit stays past
 * it until the window ends. It only ever refuses, so no instance admits more than the shared
 * limit; its entries live at most OVER_LIMIT_MEMORY_MS, never past the window, so a caller is
 * admitted again as soon as the store would admit it (within that time when an operator raises
 * the limit). An entry is named by the bucket, its limit and its window, so a changed limit is
 * a new entry. The refusals it answers are not counted in the store: the bucket is past its
 * limit already, and the answer is the same. Who fills it: callers past their own limits, at
 * most OVER_LIMIT_MEMORY_ENTRIES of them within OVER_LIMIT_MEMORY_MS; beyond that the store
 * answers.
 */
export class OverLimitMemory {
  readonly #entries = new Map<string, Entry>()
  readonly #now: () => number

  constructor (now: () => number = Date.now) {
    this.#now = now
  }

  /** The first of `limits` remembered as past its limit, as the store would report it. */
  exceeded (limits: readonly LimitHit[]): Exceeded | null {
    if (this.#entries.size === 0) return null
    const nowMs = this.#now()
    for (const limit of limits) {
      const id = idOf(limit)
      const entry = this.#entries.get(id)
      if (entry === undefined) continue
      if (entry.untilMs <= nowMs) {
        this.#entries.delete(id)
        continue
      }
      return { limit, count: { current: limit.max + 1, ttlMs: entry.resetMs - nowMs } }
    }
    return null
  }

  /** Remembers the store's answer that a caller's own bucket is past its limit. */
  remember ({ limit, count }: Exceeded): void {
    if (limit.name !== 'source' && limit.name !== 'backend') return
    const nowMs = this.#now()
    if (this.#entries.size >= OVER_LIMIT_MEMORY_ENTRIES) {
      for (const [id, entry] of this.#entries) if (entry.untilMs <= nowMs) this.#entries.delete(id)
      if (this.#entries.size >= OVER_LIMIT_MEMORY_ENTRIES) return
    }
    const resetMs = nowMs + count.ttlMs
    this.#entries.set(idOf(limit), { untilMs: Math.min(resetMs, nowMs + OVER_LIMIT_MEMORY_MS), resetMs })
  }

  get size (): number {
    return this.#entries.size
  }
}

function idOf (limit: LimitHit): string {
  const tenantId = limit.name === 'mailbox' ? '' : limit.tenantId
  return `${limit.name}\n${tenantId}\n${limit.mode}\n${limit.bucket}\n${limit.max}\n${limit.windowMs}`
}
