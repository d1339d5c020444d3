import { Cluster } from 'ioredis'
import type { RedisClient } from './client.js'
import { KeptReading, NodeReplies, nodeId, READINESS_READ_MS } from './readiness-reads.js'

/** Where the service reports what it found: pino's logger. */
export interface EvictionLog {
  error (fields: object, message: string): void
  info (fields: object, message: string): void
}

/** Whether Redis may keep what the service writes (it does not evict, and it is not full), and why not. */
export interface EvictionVerdict {
  ok: boolean
  /** The policy each primary reports (one on a single server or Sentinel). */
  policies: string[]
  /** For operators, when not ok. */
  reason: string | null
}

/** How long one reading stands, so that readiness probes stay a PING each. */
const DEFAULT_CACHE_MS = 5000

/**
 * Any policy but `noeviction` lets Redis delete keys at its memory limit: `allkeys-*` any key,
 * `volatile-*` keys with an expiry, which every key of the service has. Evicted, a velocity or
 * lockout counter starts over and a code vanishes, silently. With `noeviction` a full Redis
 * refuses writes instead, which the service answers 503 (nothing charged, no code left).
 */
export function policyEvicts (policy: string): boolean {
  return policy !== 'noeviction'
}

/** `maxmemory_policy` from the text of INFO memory. */
export function maxmemoryPolicy (info: string): string | null {
  return /^maxmemory_policy:(\S+)/m.exec(info)?.[1] ?? null
}

/**
 * Whether INFO memory shows Redis past its `maxmemory` (0: no limit). With `noeviction` it then
 * refuses every script that writes: each dispatch and verify would answer 503.
 */
export function overMemoryLimit (info: string): boolean {
  const used = Number(/^used_memory:(\d+)/m.exec(info)?.[1] ?? 0)
  const limit = Number(/^maxmemory:(\d+)/m.exec(info)?.[1] ?? 0)
  return limit > 0 && used > limit
}

/**
 * Reads Redis's `maxmemory-policy` through INFO memory (managed services often refuse CONFIG
 * GET), on every primary of a Cluster, and keeps the reading for a few seconds; a primary
 * silent past READINESS_READ_MS counts with its last reply. A policy that can evict makes the
 * stores not ready, and is logged as an error when first seen and each time it changes; its
 * return to `noeviction` is logged too.
 */
export class EvictionPolicyWatch {
  readonly #client: RedisClient
  readonly #log: EvictionLog
  readonly #reading: KeptReading<EvictionVerdict>
  readonly #infos = new NodeReplies<string>()
  /** What was last logged, so an unchanged verdict is logged once. */
  #logged = 'noeviction'

  constructor (client: RedisClient, log: EvictionLog, options: { cacheMs?: number } = {}) {
    this.#client = client
    this.#log = log
    this.#reading = new KeptReading(async () => await this.#read(), options.cacheMs ?? DEFAULT_CACHE_MS)
  }

  async check (): Promise<EvictionVerdict> {
    return await this.#reading.get()
  }

  async #read (): Promise<{ value: EvictionVerdict, keep: boolean }> {
    const primaries = this.#client instanceof Cluster ? this.#client.nodes('master') : [this.#client]
    const readings = await Promise.all(primaries.map(async (primary) => await this.#infos.read(nodeId(primary), async () => await primary.info('memory'))))
    // A Cluster primary that does not answer is only its own tenants' outage (see
    // RedisTokenStore.ready): the others' readings decide, and its last one.
    const infos = readings.flatMap((reading) => reading?.ok === true ? [reading.value] : [])
    if (infos.length === 0) {
      const [failure] = readings.flatMap((reading) => reading === null ? [`no answer within ${READINESS_READ_MS} ms`] : reading.ok ? [] : [reading.error instanceof Error ? reading.error.message : String(reading.error)])
      // Not kept: an unreachable Redis is reported by its own check, and read again next time.
      return { value: { ok: false, policies: [], reason: `maxmemory-policy could not be read: ${failure ?? 'no Redis primary known'}` }, keep: false }
    }
    const policies = infos.map((info) => maxmemoryPolicy(info) ?? 'unknown')
    const evicting = [...new Set(policies.filter(policyEvicts))]
    const full = infos.some(overMemoryLimit)
    const verdict: EvictionVerdict = evicting.length > 0
      ? { ok: false, policies, reason: `Redis maxmemory-policy is ${evicting.join(', ')}: at its memory limit it evicts keys, which resets velocity and lockout counters and deletes codes; set it to noeviction` }
      : full
        ? { ok: false, policies, reason: 'Redis is past its maxmemory and refuses writes: every dispatch and verify answers 503 until memory is freed or maxmemory raised' }
        : { ok: true, policies, reason: null }
    const summary = evicting.length > 0 ? evicting.join(',') : full ? 'full' : 'noeviction'
    if (summary !== this.#logged) {
      if (verdict.ok) this.#log.info({ maxmemoryPolicy: policies }, 'Redis maxmemory-policy is noeviction again, within its memory limit: ready')
      else this.#log.error({ maxmemoryPolicy: policies }, verdict.reason ?? '')
      this.#logged = summary
    }
    return { value: verdict, keep: true }
  }
}
