import { tenantScope } from '../../keys/scope.js'
import { appendEvent, newStory, type VerificationEvent, type VerificationId, type VerificationLog, type VerificationLogLimits, type VerificationStory } from '../verification-log.js'

/**
 * Stories kept per tenant and mode in process: the embedded default is one instance with a
 * tenant's traffic in one process; a story of four events takes about 1 KB, a full one about 3.4 KB (docs/security.md).
 */
export const MEMORY_LOG_PER_SCOPE = 10_000

interface Kept {
  createdMs: number
  story: VerificationStory
}

/**
 * Stories in process, one table per tenant and mode, each in the order its verifications were
 * requested: past retention or past the table's cap the oldest go first, so one tenant filling
 * its table forgets only its own. Written at once (there is no round trip to save).
 */
export class MemoryVerificationLog implements VerificationLog {
  readonly #scopes = new Map<string, Map<string, Kept>>()
  readonly #retentionMs: number
  readonly #maxPerScope: number
  readonly #now: () => number

  constructor (limits: VerificationLogLimits, options: { now?: () => number } = {}) {
    this.#retentionMs = limits.retentionMs
    this.#maxPerScope = Math.min(limits.maxPerScope, MEMORY_LOG_PER_SCOPE)
    this.#now = options.now ?? Date.now
  }

  record (id: VerificationId, event: VerificationEvent): void {
    const scope = tenantScope(id.tenantId, id.mode)
    const now = this.#now()
    let table = this.#scopes.get(scope)
    if (event.type === 'requested') {
      if (table === undefined) {
        table = new Map()
        this.#scopes.set(scope, table)
      }
      if (table.has(id.requestId)) return
      this.#forgetOld(table, now)
      while (table.size >= this.#maxPerScope) {
        const oldest = table.keys().next()
        if (oldest.done === true) break
        table.delete(oldest.value)
      }
      table.set(id.requestId, { createdMs: now, story: newStory(event) })
      return
    }
    const kept = table?.get(id.requestId)
    if (kept === undefined || this.#expired(kept, now)) return
    appendEvent(kept.story, event)
  }

  async read (id: VerificationId): Promise<VerificationStory | null> {
    const kept = this.#scopes.get(tenantScope(id.tenantId, id.mode))?.get(id.requestId)
    if (kept === undefined || this.#expired(kept, this.#now())) return null
    return structuredClone(kept.story)
  }

  async flush (): Promise<void> {}

  dropped (): number {
    return 0
  }

  async close (): Promise<void> {
    this.#scopes.clear()
  }

  /** The number of stories kept for a scope (tests, the security table's measurement). */
  size (tenantId: string, mode: VerificationId['mode']): number {
    return this.#scopes.get(tenantScope(tenantId, mode))?.size ?? 0
  }

  #expired (kept: Kept, now: number): boolean {
    return now - kept.createdMs >= this.#retentionMs
  }

  /** From the oldest, up to the first story still within retention (the table is in creation order). */
  #forgetOld (table: Map<string, Kept>, now: number): void {
    for (const [requestId, kept] of table) {
      if (!this.#expired(kept, now)) break
      table.delete(requestId)
    }
  }
}
