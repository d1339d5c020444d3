import type { RedisClient } from './client.js'
import { FENCE_LUA, redisClock, UNDO_SHEBANG, WRITES_SHEBANG, type RedisClock } from './fence.js'
import { storeCall, storeUndo } from '../../store-errors.js'
import {
  assertDurations, assertScope, type IdempotencyBegin, type IdempotencyStore, type StoredResponse
} from '../idempotency.js'

/*
 * Each key is two Redis keys sharing the scope as hash tag (one Cluster slot, so the scripts
 * may touch both):
 *   record  <prefix>{<scope>}:r:<key>  hash { fingerprint, response? }, expires after ttlMs
 *   lock    <prefix>{<scope>}:l:<key>  exists while an attempt is in flight, expires after lockMs
 * Keeping the lock separate lets Redis expire the claim on its own clock while the record keeps
 * the key bound to its fingerprint for the full ttl.
 * Begin and complete are fenced (lib/state/redis/fence.ts: their last argument is the deadline by
 * which they must start): a claim or an answer the caller gave up on is not recorded later.
 * Abandon only removes, so it is not, and runs at Redis's memory limit too.
 */

/** KEYS record, lock; ARGV fingerprint, ttlMs, lockMs. Returns { state, response? }. */
const BEGIN_LUA = `${WRITES_SHEBANG}${FENCE_LUA}local stored = redis.call('HMGET', KEYS[1], 'fingerprint', 'response')
if stored[1] then
  if stored[1] ~= ARGV[1] then return { 'mismatch' } end
  if stored[2] then return { 'replay', stored[2] } end
  if redis.call('EXISTS', KEYS[2]) == 1 then return { 'in_flight' } end
  -- The claim lapsed without complete or abandon: its owner died, this retry takes over.
end
redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
return { 'started' }
`

/** KEYS record, lock; ARGV fingerprint, response JSON, ttlMs. First completion wins. */
const COMPLETE_LUA = `${WRITES_SHEBANG}${FENCE_LUA}local stored = redis.call('HMGET', KEYS[1], 'fingerprint', 'response')
if (stored[1] and stored[1] ~= ARGV[1]) or stored[2] then return 0 end
redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'response', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
return 1
`

/** KEYS record, lock. A completed response is kept: only a claim can be abandoned. */
const ABANDON_LUA = `${UNDO_SHEBANG}if redis.call('HEXISTS', KEYS[1], 'response') == 1 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
`

/** Names are specific to this service: defineCommand adds methods to a client others share. */
const BEGIN_COMMAND = 'emailOtpIdempotencyBegin'
const COMPLETE_COMMAND = 'emailOtpIdempotencyComplete'
const ABANDON_COMMAND = 'emailOtpIdempotencyAbandon'

/** The methods defineCommand adds; ioredis cannot type them, so this describes them. */
interface IdempotencyCommands {
  [BEGIN_COMMAND](record: string, lock: string, fingerprint: string, ttlMs: string, lockMs: string, deadline: string): Promise<unknown>
  [COMPLETE_COMMAND](record: string, lock: string, fingerprint: string, response: string, ttlMs: string, deadline: string): Promise<unknown>
  [ABANDON_COMMAND](record: string, lock: string): Promise<unknown>
}

export interface RedisIdempotencyStoreOptions {
  /** Key prefix, `idem:` by default. Must not contain braces: the hash tag follows it. */
  prefix?: string
}

/**
 * Idempotency store shared by every instance through Redis; each operation is one script, so
 * atomic across instances. Failures (Redis down) reject and are the caller's to map to 503.
 */
export class RedisIdempotencyStore implements IdempotencyStore {
  readonly #commands: IdempotencyCommands
  readonly #clock: RedisClock
  readonly #prefix: string

  constructor (client: RedisClient, options: RedisIdempotencyStoreOptions = {}) {
    const prefix = options.prefix ?? 'idem:'
    if (/[{}]/.test(prefix)) throw new RangeError(`idempotency key prefix must not contain braces: ${prefix}`)
    this.#prefix = prefix
    this.#clock = redisClock(client)
    // defineCommand runs EVALSHA and falls back to EVAL when the server lacks the script
    // (first use, restart, failover), so scripts are sent in full only when needed.
    client.defineCommand(BEGIN_COMMAND, { lua: BEGIN_LUA, numberOfKeys: 2 })
    client.defineCommand(COMPLETE_COMMAND, { lua: COMPLETE_LUA, numberOfKeys: 2 })
    client.defineCommand(ABANDON_COMMAND, { lua: ABANDON_LUA, numberOfKeys: 2 })
    this.#commands = client as unknown as IdempotencyCommands
  }

  async begin (scope: string, key: string, fingerprint: string, ttlMs: number, lockMs: number): Promise<IdempotencyBegin> {
    assertScope(scope)
    assertDurations(ttlMs, lockMs)
    const [record, lock] = this.#keys(scope, key)
    const reply = await storeCall('idempotency begin', async () => await this.#commands[BEGIN_COMMAND](record, lock, fingerprint, String(ttlMs), String(lockMs), await this.#clock.deadline()))
    const [state, stored] = Array.isArray(reply) ? reply as unknown[] : []
    switch (state) {
      case 'started':
      case 'in_flight':
      case 'mismatch':
        return { state }
      case 'replay':
        return { state, response: parseResponse(stored) }
      default:
        throw new Error(`unexpected reply from the idempotency begin script: ${JSON.stringify(reply)}`)
    }
  }

  async complete (scope: string, key: string, fingerprint: string, response: StoredResponse, ttlMs: number): Promise<void> {
    assertScope(scope)
    assertDurations(ttlMs)
    const [record, lock] = this.#keys(scope, key)
    const json = JSON.stringify({ statusCode: response.statusCode, body: response.body, headers: response.headers })
    await storeCall('idempotency complete', async () => await this.#commands[COMPLETE_COMMAND](record, lock, fingerprint, json, String(ttlMs), await this.#clock.deadline()))
  }

  async abandon (scope: string, key: string): Promise<void> {
    assertScope(scope)
    const [record, lock] = this.#keys(scope, key)
    await storeUndo('idempotency abandon', async () => await this.#commands[ABANDON_COMMAND](record, lock))
  }

  #keys (scope: string, key: string): [record: string, lock: string] {
    const base = `${this.#prefix}{${scope}}:`
    // Distinct type markers, so a user's key ending in a suffix can never name another's lock.
    return [`${base}r:${key}`, `${base}l:${key}`]
  }
}

/** Checks what comes back from Redis rather than trusting it: a bad replay is worse than none. */
function parseResponse (stored: unknown): StoredResponse {
  const value: unknown = typeof stored === 'string' ? JSON.parse(stored) : undefined
  if (typeof value === 'object' && value !== null && 'statusCode' in value && 'body' in value && 'headers' in value) {
    const { statusCode, body, headers } = value
    if (typeof statusCode === 'number' && typeof body === 'string' && isStringRecord(headers)) {
      return { statusCode, body, headers }
    }
  }
  throw new Error('stored idempotent response is malformed')
}

function isStringRecord (value: unknown): value is Record<string, string> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) &&
    Object.values(value).every((item) => typeof item === 'string')
}
