import type { RedisClient } from './client.js'
import { idempotencyKeys } from './keys.js'
import { redisClock, type RedisClock } from './fence.js'
import { storeCall, storeUndo } from '../../store-errors.js'
import {
  assertDurations, assertScope, type IdempotencyBegin, type IdempotencyStore, type StoredResponse
} from '../idempotency.js'
import { packArgs, type PackedArgs } from './script-args.js'
import { IDEMPOTENCY_ABANDON_ARGS, IDEMPOTENCY_ABANDON_LUA, IDEMPOTENCY_BEGIN_ARGS, IDEMPOTENCY_BEGIN_LUA, IDEMPOTENCY_COMPLETE_ARGS, IDEMPOTENCY_COMPLETE_LUA, IDEMPOTENCY_SENDING_ARGS, IDEMPOTENCY_SENDING_LUA } from './scripts.js'

/*
 * Each key is two Redis keys sharing the scope as hash tag (one Cluster slot, so the scripts
 * may touch both):
 *   record  idem:{<scope>}:r:<key>  hash { fingerprint, attempt, sending?, response? }, expires after ttlMs
 *   lock    idem:{<scope>}:l:<key>  exists while an attempt is in flight, expires after lockMs
 * Keeping the lock separate lets Redis expire the claim on its own clock while the record keeps
 * the key bound to its fingerprint (and, once `sending` is set, closed to other attempts) for
 * the full ttl.
 * Begin and sending are fenced (lib/state/redis/fence.ts: their last argument is the deadline by
 * which they must start): a claim or a mark the caller gave up on is not made later, and a begin
 * whose answer was lost all the same is released at once (an abandon sent after it on the same
 * connection). Complete is sent like an undo: landing late only records the answer that was
 * given, so it is neither fenced nor given up on while Redis is stalled. Abandon only removes,
 * and runs at Redis's memory limit too.
 */

/** Names are specific to this service: defineCommand adds methods to a client others share. */
const BEGIN_COMMAND = 'emailOtpIdempotencyBegin'
const SENDING_COMMAND = 'emailOtpIdempotencySending'
const COMPLETE_COMMAND = 'emailOtpIdempotencyComplete'
const ABANDON_COMMAND = 'emailOtpIdempotencyAbandon'

/** The methods defineCommand adds: the script's keys, then its arguments (a fenced one's deadline last). */
type IdempotencyCommands = Record<typeof BEGIN_COMMAND | typeof SENDING_COMMAND | typeof COMPLETE_COMMAND | typeof ABANDON_COMMAND, (...keysAndArgs: string[]) => Promise<unknown>>

const call = ({ keys, args }: PackedArgs, ...deadline: string[]): string[] => [...keys, ...args, ...deadline]

/**
 * Idempotency store shared by every instance through Redis; each operation is one script, so
 * atomic across instances. Failures (Redis down) reject and are the caller's to map to 503.
 */
export class RedisIdempotencyStore implements IdempotencyStore {
  readonly #commands: IdempotencyCommands
  readonly #clock: RedisClock

  constructor (client: RedisClient) {
    this.#clock = redisClock(client)
    // defineCommand runs EVALSHA and falls back to EVAL when the server lacks the script
    // (first use, restart, failover), so scripts are sent in full only when needed.
    client.defineCommand(BEGIN_COMMAND, { lua: IDEMPOTENCY_BEGIN_LUA, numberOfKeys: IDEMPOTENCY_BEGIN_ARGS.keys.length })
    client.defineCommand(SENDING_COMMAND, { lua: IDEMPOTENCY_SENDING_LUA, numberOfKeys: IDEMPOTENCY_SENDING_ARGS.keys.length })
    client.defineCommand(COMPLETE_COMMAND, { lua: IDEMPOTENCY_COMPLETE_LUA, numberOfKeys: IDEMPOTENCY_COMPLETE_ARGS.keys.length })
    client.defineCommand(ABANDON_COMMAND, { lua: IDEMPOTENCY_ABANDON_LUA, numberOfKeys: IDEMPOTENCY_ABANDON_ARGS.keys.length })
    this.#commands = client as unknown as IdempotencyCommands
  }

  async begin (scope: string, key: string, fingerprint: string, attempt: string, ttlMs: number, lockMs: number): Promise<IdempotencyBegin> {
    assertScope(scope)
    assertDurations(ttlMs, lockMs)
    const [record, lock] = idempotencyKeys(scope, key)
    const begin = packArgs(IDEMPOTENCY_BEGIN_ARGS, { record, lock, fingerprint, attempt, ttlMs, lockMs })
    const abandon = packArgs(IDEMPOTENCY_ABANDON_ARGS, { record, lock, attempt })
    let reply: unknown
    try {
      reply = await storeCall('idempotency begin', async () => await this.#commands[BEGIN_COMMAND](...call(begin, await this.#clock.deadline())))
    } catch (error) {
      // The script may have run just before Redis stalled: a claim nobody goes on with would
      // hold the key. Sent after it on the same connection, the abandon lands after it.
      await storeUndo('idempotency abandon after a failed begin', async () => await this.#commands[ABANDON_COMMAND](...call(abandon))).catch(() => {})
      throw error
    }
    const [state, stored] = Array.isArray(reply) ? reply as unknown[] : []
    switch (state) {
      case 'started':
      case 'in_flight':
      case 'unknown':
      case 'mismatch':
        return { state }
      case 'replay':
        return { state, response: parseResponse(stored) }
      default:
        throw new Error(`unexpected reply from the idempotency begin script: ${JSON.stringify(reply)}`)
    }
  }

  async sending (scope: string, key: string, attempt: string): Promise<boolean> {
    assertScope(scope)
    const [record] = idempotencyKeys(scope, key)
    const sending = packArgs(IDEMPOTENCY_SENDING_ARGS, { record, attempt })
    return await storeCall('idempotency sending', async () => await this.#commands[SENDING_COMMAND](...call(sending, await this.#clock.deadline()))) === 1
  }

  async complete (scope: string, key: string, fingerprint: string, attempt: string, response: StoredResponse, ttlMs: number): Promise<void> {
    assertScope(scope)
    assertDurations(ttlMs)
    const [record, lock] = idempotencyKeys(scope, key)
    const json = JSON.stringify({ statusCode: response.statusCode, body: response.body, headers: response.headers })
    const complete = packArgs(IDEMPOTENCY_COMPLETE_ARGS, { record, lock, fingerprint, attempt, response: json, ttlMs })
    await storeUndo('idempotency complete', async () => await this.#commands[COMPLETE_COMMAND](...call(complete)))
  }

  async abandon (scope: string, key: string, attempt: string): Promise<void> {
    assertScope(scope)
    const [record, lock] = idempotencyKeys(scope, key)
    const abandon = packArgs(IDEMPOTENCY_ABANDON_ARGS, { record, lock, attempt })
    await storeUndo('idempotency abandon', async () => await this.#commands[ABANDON_COMMAND](...call(abandon)))
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
