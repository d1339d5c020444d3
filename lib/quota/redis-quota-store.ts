import type { RedisClient } from '../redis/client.js'
import { FENCE_LUA, redisClock, UNDO_SHEBANG, WRITES_SHEBANG, type RedisClock } from '../redis/fence.js'
import { storeCall, storeUndo } from '../store-errors.js'
import { assertLimit, assertScope, type QuotaDecision, type QuotaStore, type QuotaUsage } from './quota-store.js'
import { currentWindow, type QuotaWindow } from '../limits/window.js'

/**
 * A window's counter outlives its reset by this much. Instances' clocks differ slightly: were the
 * key to expire exactly at reset, an instance running a little behind could recreate the old
 * window's counter from zero and grant its allowance a second time. It also lets a refund that
 * races the reset land on the counter it belongs to instead of vanishing.
 */
const EXPIRY_GRACE_MS = 5 * 60_000

/**
 * Takes one unit of the counter at `key` unless `limit` are used; returns allowed 0|1 and the
 * count. Checking before INCR (rather than INCR then DECR on refusal) keeps refused calls
 * from ever changing the count. PEXPIREAT is set on every grant, not only the first, so a
 * counter that somehow lost its expiry still gets one.
 *
 * `reserveQuotas` takes a unit of every counter or of none (a restricted key's share and its
 * tenant's whole allowance): KEYS[first + i - 1] with limit and expiry in
 * ARGV[firstArg + 2(i - 1)] and the next one, for i = 1..count. It returns allowed 0|1 and the
 * count of the first counter (the tenant's, which the Quota-* headers describe).
 * Both are Lua functions, shared with the dispatch script of lib/admission.
 */
export const RESERVE_QUOTA_LUA = `
local function reserveQuota (key, limit, expireAtMs)
  local used = tonumber(redis.call('GET', key) or '0')
  if used >= limit then
    return 0, used
  end
  used = redis.call('INCR', key)
  redis.call('PEXPIREAT', key, expireAtMs)
  return 1, used
end
local function reserveQuotas (first, count, firstArg)
  local firstUsed = tonumber(redis.call('GET', KEYS[first]) or '0')
  for i = 0, count - 1 do
    local used = tonumber(redis.call('GET', KEYS[first + i]) or '0')
    if used >= tonumber(ARGV[firstArg + 2 * i]) then return 0, firstUsed end
  end
  for i = 0, count - 1 do
    local used = redis.call('INCR', KEYS[first + i])
    redis.call('PEXPIREAT', KEYS[first + i], ARGV[firstArg + 2 * i + 1])
    if i == 0 then firstUsed = used end
  end
  return 1, firstUsed
end
`

/** KEYS[1] counter; ARGV[1] limit, ARGV[2] expiry (epoch ms), ARGV[3] the fence's deadline. Returns { allowed 0|1, used }. */
const RESERVE_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${RESERVE_QUOTA_LUA}
return { reserveQuota(KEYS[1], tonumber(ARGV[1]), ARGV[2]) }
`

/**
 * KEYS[1] counter. A missing key means the window is over (or never counted anything), and
 * recreating it would leave a counter without an expiry, so that is a no-op. DECR keeps the TTL.
 * Not fenced, and run at Redis's memory limit too: a refund that lands late, or on a full
 * Redis, only brings the count closer to the mail that left.
 */
const REFUND_LUA = `${UNDO_SHEBANG}local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used > 0 then
  redis.call('DECR', KEYS[1])
end
return 0
`

/** Names are specific to this service: defineCommand adds methods to a client others share. */
const RESERVE_COMMAND = 'emailOtpQuotaReserve'
const REFUND_COMMAND = 'emailOtpQuotaRefund'

/** The methods defineCommand adds; ioredis cannot type them, so this describes them. */
interface QuotaCommands {
  [RESERVE_COMMAND](key: string, limit: string, expireAtMs: string, deadline: string): Promise<unknown>
  [REFUND_COMMAND](key: string): Promise<unknown>
}

/** Where a reservation made at `nowMs` counts, and until when that counter lives. */
export interface QuotaSlot {
  key: string
  windowId: string
  resetMs: number
  expireAtMs: number
}

const DEFAULT_PREFIX = 'quota:'

/** A key's share is its own counter beside the tenant's, under the same hash tag. */
function counterKey (prefix: string, scope: string, share: string | null, windowId: string): string {
  return share === null ? `${prefix}{${scope}}:${windowId}` : `${prefix}{${scope}}:k:${share}:${windowId}`
}

/**
 * The counter of the window containing `nowMs`: `<prefix>{<scope>}:<windowId>`, or
 * `<prefix>{<scope>}:k:<key id>:<windowId>` for a restricted key's share. The scope is the
 * hash tag, so all of a tenant's counters (and its tokens and velocity counters) live on one
 * Cluster slot.
 */
export function quotaSlot (scope: string, window: QuotaWindow, nowMs: number, share: string | null = null, prefix = DEFAULT_PREFIX): QuotaSlot {
  assertScope(scope)
  const { id, resetMs } = currentWindow(window, nowMs)
  return { key: counterKey(prefix, scope, share, id), windowId: id, resetMs, expireAtMs: resetMs + EXPIRY_GRACE_MS }
}

/** The decision for a reservation script's reply `{ allowed 0|1, used }`. */
export function quotaDecision (reply: unknown, limit: number, slot: QuotaSlot): QuotaDecision {
  if (!Array.isArray(reply) || typeof reply[0] !== 'number' || typeof reply[1] !== 'number') {
    throw new Error(`unexpected reply from the quota reserve script: ${JSON.stringify(reply)}`)
  }
  const used = reply[1]
  // `used` can exceed a limit lowered mid-window; remaining never goes negative.
  return { allowed: reply[0] === 1, used, remaining: Math.max(0, limit - used), resetMs: slot.resetMs, windowId: slot.windowId }
}

export interface RedisQuotaStoreOptions {
  /** Key prefix, `quota:` by default. Must not contain braces: the hash tag follows it. */
  prefix?: string
}

/**
 * Quota store shared by every instance through Redis. Each window's count is one key,
 * `<prefix>{<scope>}:<windowId>`; the scope is the hash tag so all of a tenant's counters live on
 * one Cluster slot. Each operation is a single script, hence atomic across instances. Failures
 * (Redis down) reject promptly as long as the client is built to fail fast; the caller maps
 * them to 503.
 */
export class RedisQuotaStore implements QuotaStore {
  readonly #client: RedisClient
  readonly #clock: RedisClock
  readonly #commands: QuotaCommands
  readonly #prefix: string

  constructor (client: RedisClient, options: RedisQuotaStoreOptions = {}) {
    const prefix = options.prefix ?? DEFAULT_PREFIX
    if (/[{}]/.test(prefix)) throw new RangeError(`quota key prefix must not contain braces: ${prefix}`)
    this.#prefix = prefix
    this.#client = client
    this.#clock = redisClock(client)
    // defineCommand runs EVALSHA and falls back to EVAL when the server lacks the script
    // (first use, restart, failover), so scripts are sent in full only when needed.
    client.defineCommand(RESERVE_COMMAND, { lua: RESERVE_LUA, numberOfKeys: 1 })
    client.defineCommand(REFUND_COMMAND, { lua: REFUND_LUA, numberOfKeys: 1 })
    this.#commands = client as unknown as QuotaCommands
  }

  async reserve (scope: string, limit: number, window: QuotaWindow, nowMs: number, share: string | null = null): Promise<QuotaDecision> {
    assertLimit(limit)
    const slot = quotaSlot(scope, window, nowMs, share, this.#prefix)
    const reply = await storeCall('quota reserve', async () => await this.#commands[RESERVE_COMMAND](slot.key, String(limit), String(slot.expireAtMs), await this.#clock.deadline()))
    return quotaDecision(reply, limit, slot)
  }

  async refund (scope: string, windowId: string, share: string | null = null): Promise<void> {
    assertScope(scope)
    await storeUndo('quota refund', async () => await this.#commands[REFUND_COMMAND](counterKey(this.#prefix, scope, share, windowId)))
  }

  async usage (scope: string, window: QuotaWindow, nowMs: number, share: string | null = null): Promise<QuotaUsage> {
    const slot = quotaSlot(scope, window, nowMs, share, this.#prefix)
    const value = await storeCall('quota usage', async () => await this.#client.get(slot.key))
    return { used: value === null ? 0 : Number(value), resetMs: slot.resetMs, windowId: slot.windowId }
  }
}
