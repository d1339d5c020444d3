import { storeCall } from '../../store-errors.js'
import type { RedisClient } from './client.js'
import { defineWideKeyedScript, type KeyedScript } from './keyed-script.js'
import { insightsKeyPrefix, verificationLogKeys } from './keys.js'
import { packArgs } from './script-args.js'
import { WRITE_BEHIND_MS, WriteBehind } from './write-behind.js'
import { VERIFICATION_LOG_ARGS, VERIFICATION_LOG_LUA } from './scripts.js'
import type { Lane } from '../admission.js'
import { COUNTED_BY, INSIGHTS_DEFAULTS, type InsightsLimits } from '../insights.js'
import { browserStories, MAX_LISTED, type LaterEvent, type RequestedEvent, type VerificationEvent, type VerificationEventType, type VerificationId, type VerificationLog, type VerificationLogLimits, type VerificationStory } from '../verification-log.js'

/**
 * Events queued or being written; past it new ones are dropped (and counted) rather than held, so
 * that a Redis that stalls costs this process a bounded memory, not one more write per request.
 */
export const MAX_BUFFERED_EVENTS = 10_000
/** Events of one scope per script call, so that one call never holds Redis long. */
const EVENTS_PER_CALL = 256

/** The field an event is counted by in the funnel (lib/state/insights.ts COUNTED_BY), empty for the others. */
function detailOf (event: VerificationEvent): string {
  const by = COUNTED_BY[event.type]
  return by === undefined ? '' : String((event as unknown as Record<string, unknown>)[by] ?? '')
}

interface Pending {
  tenantId: string
  mode: VerificationId['mode']
  entries: Array<{ requestId: string, event: VerificationEvent, lane: Lane | '' }>
}

/**
 * Stories in Redis, shared by every instance, each gone by itself after retention, and the
 * funnel's counts of their events in the same script (lib/state/insights.ts). A dispatch or
 * a verify pays no round trip for its events: `record` queues them in process, written WRITE_BEHIND_MS later
 * (or at once when a call's worth is queued) with every event queued meanwhile, one script per
 * tenant and mode (the keys of one scope share its slot). The queue is bounded; an event past it, or of a write that
 * failed, is lost and counted (`dropped`), the request that made it answered all the same.
 */
export class RedisVerificationLog implements VerificationLog {
  readonly #client: RedisClient
  readonly #script: KeyedScript
  readonly #limits: VerificationLogLimits
  readonly #insights: InsightsLimits
  #pending = new Map<string, Pending>()
  /** Events queued or in a write not settled yet. */
  #buffered = 0
  /** Events queued for the next write. */
  #queued = 0
  #dropped = 0
  readonly #schedule: WriteBehind

  /**
   * `insights`: how long the funnel's buckets its script counts in are kept (INSIGHTS_DAYS).
   * `writeBehindMs`: how long events gather before a write (tests hold them longer).
   */
  constructor (client: RedisClient, limits: VerificationLogLimits, insights: InsightsLimits = INSIGHTS_DEFAULTS, { writeBehindMs = WRITE_BEHIND_MS }: { writeBehindMs?: number } = {}) {
    this.#schedule = new WriteBehind(writeBehindMs, () => this.#write())
    this.#client = client
    this.#limits = limits
    this.#insights = insights
    // The lane indexes, the insights prefix, and one story per event.
    this.#script = defineWideKeyedScript(client, 'emailOtpVerificationLog', VERIFICATION_LOG_LUA, 3 + EVENTS_PER_CALL)
  }

  start (id: VerificationId, lane: Lane, event: RequestedEvent): void {
    this.#queue(id, event, lane)
  }

  record (id: VerificationId, event: LaterEvent): void {
    this.#queue(id, event, '')
  }

  async read (id: VerificationId): Promise<VerificationStory | null> {
    // This instance's own events first: a backend reading the story its dispatch just started sees it.
    await this.flush()
    const key = verificationLogKeys(id.tenantId, id.mode).story(id.requestId)
    const fields = await storeCall('verification story read', async () => await this.#client.hgetall(key))
    if (fields.e1 === undefined) return null
    const events: VerificationEvent[] = []
    for (let i = 1; i <= MAX_LISTED; i++) {
      const json = fields[`e${i}`]
      if (json === undefined) break
      events.push(JSON.parse(json) as VerificationEvent)
    }
    const counts: VerificationStory['counts'] = {}
    for (const [field, value] of Object.entries(fields)) {
      if (field.startsWith('n:')) counts[field.slice(2) as VerificationEventType] = Number(value)
    }
    return { events, counts }
  }

  #queue (id: VerificationId, event: VerificationEvent, lane: Lane | ''): void {
    if (this.#buffered >= MAX_BUFFERED_EVENTS) {
      this.#dropped++
      return
    }
    // Length-prefixed: no tenant id can make two scopes one.
    const scope = `${id.tenantId.length}:${id.tenantId}:${id.mode}`
    let pending = this.#pending.get(scope)
    if (pending === undefined) {
      pending = { tenantId: id.tenantId, mode: id.mode, entries: [] }
      this.#pending.set(scope, pending)
    }
    pending.entries.push({ requestId: id.requestId, event, lane })
    this.#buffered++
    this.#queued++
    this.#schedule.queued(this.#queued >= EVENTS_PER_CALL)
  }

  async flush (): Promise<void> {
    await this.#schedule.flush()
  }

  dropped (): number {
    return this.#dropped
  }

  async close (): Promise<void> {
    await this.flush()
  }

  #write (): Array<Promise<void>> {
    const writes: Array<Promise<void>> = []
    const pending = this.#pending
    this.#pending = new Map()
    this.#queued = 0
    for (const { tenantId, mode, entries } of pending.values()) {
      const keys = verificationLogKeys(tenantId, mode)
      const insights = insightsKeyPrefix(tenantId, mode)
      for (let from = 0; from < entries.length; from += EVENTS_PER_CALL) {
        const batch = entries.slice(from, from + EVENTS_PER_CALL)
        const packed = packArgs(VERIFICATION_LOG_ARGS, {
          index: keys.index,
          browserIndex: keys.browserIndex,
          insights,
          stories: batch.map(({ requestId }) => keys.story(requestId)),
          retentionMs: this.#limits.retentionMs,
          maxStories: this.#limits.maxPerScope,
          maxBrowserStories: browserStories(this.#limits.maxPerScope),
          insightsRetentionMs: this.#insights.retentionMs,
          events: batch.map(({ event, lane }) => ({ type: event.type, lane, json: JSON.stringify(event), atMs: Date.parse(event.at), detail: detailOf(event) }))
        })
        writes.push(this.#script(packed.keys, packed.args).then(() => {}, () => { this.#dropped += batch.length }).finally(() => { this.#buffered -= batch.length }))
      }
    }
    return writes
  }
}
