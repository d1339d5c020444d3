import Denque from 'denque'
import { tenantScope } from '../../keys/scope.js'
import type { Lane } from '../admission.js'
import { eventFields, type CohortTimes } from '../insights.js'
import type { MemoryInsights } from './insights.js'
import { appendEvent, browserStories, newStory, type LaterEvent, type RequestedEvent, type VerificationId, type VerificationLog, type VerificationLogLimits, type VerificationStory } from '../verification-log.js'

/**
 * Backend stories kept per tenant and mode in process (its pages keep half as many more): the
 * embedded default is one instance with a tenant's traffic in one process; a story of four events
 * takes about 1 KB, a full one about 5 KB (docs/security.md).
 */
export const MEMORY_LOG_PER_SCOPE = 10_000

interface Kept {
  requestId: string
  createdMs: number
  story: VerificationStory
  /** The story's cohort and send time, for the funnel's counts. */
  times: CohortTimes
}

/**
 * A lane's stories by requestId, and the same stories in the order they were started. The order
 * is a queue of its own: a Map's oldest entry is found by walking its insertion order, which at
 * the cap holds thousands of deleted slots before V8 compacts it, and that walk on every start
 * was a sixth of an in-memory dispatch's CPU.
 */
interface Table {
  byId: Map<string, Kept>
  oldestFirst: Denque<Kept>
}

/** A scope's stories, one table per lane. */
type Tables = Record<Lane, Table>

function newTable (): Table {
  return { byId: new Map(), oldestFirst: new Denque() }
}

/**
 * Stories in process, per tenant and mode and per lane: past retention or past its lane's cap a
 * table's oldest go first, so one tenant filling its tables forgets only its own, and its pages
 * filling theirs forget only theirs. Written at once (there is no round trip to save).
 */
export class MemoryVerificationLog implements VerificationLog {
  readonly #scopes = new Map<string, Tables>()
  readonly #retentionMs: number
  readonly #caps: Record<Lane, number>
  readonly #now: () => number
  readonly #insights: MemoryInsights | null

  /** `insights`: where its stories' events are counted for the funnel (nowhere when not given). */
  constructor (limits: VerificationLogLimits, options: { now?: () => number, insights?: MemoryInsights } = {}) {
    this.#insights = options.insights ?? null
    this.#retentionMs = limits.retentionMs
    const backend = Math.min(limits.maxPerScope, MEMORY_LOG_PER_SCOPE)
    this.#caps = { backend, browser: browserStories(backend) }
    this.#now = options.now ?? Date.now
  }

  start (id: VerificationId, lane: Lane, event: RequestedEvent): void {
    const scope = tenantScope(id.tenantId, id.mode)
    let tables = this.#scopes.get(scope)
    if (tables === undefined) {
      tables = { backend: newTable(), browser: newTable() }
      this.#scopes.set(scope, tables)
    }
    if (tables.backend.byId.has(id.requestId) || tables.browser.byId.has(id.requestId)) return
    const now = this.#now()
    const table = tables[lane]
    this.#forgetOld(tables.backend, now)
    this.#forgetOld(tables.browser, now)
    while (table.oldestFirst.length >= this.#caps[lane]) forgetOldest(table)
    const requestedMs = Date.parse(event.at)
    const kept: Kept = { requestId: id.requestId, createdMs: now, story: newStory(event), times: { requestedMs, sentMs: null } }
    table.byId.set(id.requestId, kept)
    table.oldestFirst.push(kept)
    this.#insights?.count(id.tenantId, id.mode, requestedMs, ['requested'])
  }

  record (id: VerificationId, event: LaterEvent): void {
    const kept = this.#kept(id)
    if (kept === undefined || this.#expired(kept, this.#now())) return
    appendEvent(kept.story, event)
    const count = kept.story.counts[event.type] ?? 0
    if (event.type === 'sent' && count === 1) kept.times.sentMs = Date.parse(event.at)
    this.#insights?.count(id.tenantId, id.mode, kept.times.requestedMs, eventFields(event, count, kept.times, (kept.story.counts.verified ?? 0) > 0))
  }

  async read (id: VerificationId): Promise<VerificationStory | null> {
    const kept = this.#kept(id)
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

  /** The number of stories kept for a scope, both lanes (tests, the security table's measurement). */
  size (tenantId: string, mode: VerificationId['mode']): number {
    const tables = this.#scopes.get(tenantScope(tenantId, mode))
    return (tables?.backend.byId.size ?? 0) + (tables?.browser.byId.size ?? 0)
  }

  #kept (id: VerificationId): Kept | undefined {
    const tables = this.#scopes.get(tenantScope(id.tenantId, id.mode))
    return tables?.backend.byId.get(id.requestId) ?? tables?.browser.byId.get(id.requestId)
  }

  #expired (kept: Kept, now: number): boolean {
    return now - kept.createdMs >= this.#retentionMs
  }

  /** From the oldest, up to the first story still within retention. */
  #forgetOld (table: Table, now: number): void {
    for (let oldest = table.oldestFirst.peekFront(); oldest !== undefined && this.#expired(oldest, now); oldest = table.oldestFirst.peekFront()) {
      forgetOldest(table)
    }
  }
}

function forgetOldest (table: Table): void {
  const oldest = table.oldestFirst.shift()
  if (oldest !== undefined) table.byId.delete(oldest.requestId)
}
