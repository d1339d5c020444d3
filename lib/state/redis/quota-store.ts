import type { RedisClient } from './client.js'
import { quotaKey } from './keys.js'
import { storeCall, storeUndo } from '../../store-errors.js'
import { assertScope, type QuotaDecision, type QuotaStore, type QuotaUsage } from '../quota.js'
import { currentWindow, type QuotaWindow } from '../../limits/window.js'
import { packArgs } from './script-args.js'
import { COUNTER_REFUND_ARGS, COUNTER_REFUND_LUA } from './scripts.js'

/**
 * A window's counter outlives its reset by this much. Instances' clocks differ slightly: were the
 * key to expire exactly at reset, an instance running a little behind could recreate the old
 * window's counter from zero and grant its allowance a second time. It also lets a refund that
 * races the reset land on the counter it belongs to instead of vanishing.
 */
const EXPIRY_GRACE_MS = 5 * 60_000

/** Specific to this service: defineCommand adds methods to a client others share. */
const REFUND_COMMAND = 'emailOtpQuotaRefund'

/** The method defineCommand adds; ioredis cannot type it, so this describes it. */
interface QuotaCommands {
  [REFUND_COMMAND](...keysAndArgs: string[]): Promise<unknown>
}

/** Where a reservation made at `nowMs` counts, and until when that counter lives. */
export interface QuotaSlot {
  key: string
  windowId: string
  resetMs: number
  expireAtMs: number
}

/**
 * The counter of the window containing `nowMs`: `quota:{<scope>}:<windowId>`, or
 * `quota:{<scope>}:k:<key id>:<windowId>` for a restricted key's share (keys.ts). The scope is the
 * hash tag, so all of a tenant's counters (and its tokens and velocity counters) live on one
 * Cluster slot.
 */
export function quotaSlot (scope: string, window: QuotaWindow, nowMs: number, share: string | null = null): QuotaSlot {
  assertScope(scope)
  const { id, resetMs } = currentWindow(window, nowMs)
  return { key: quotaKey(scope, share, id), windowId: id, resetMs, expireAtMs: resetMs + EXPIRY_GRACE_MS }
}

/** The decision for the dispatch script's reservation, `{ allowed 0|1, used }`. */
export function quotaDecision (reply: unknown, limit: number, slot: QuotaSlot): QuotaDecision {
  if (!Array.isArray(reply) || typeof reply[0] !== 'number' || typeof reply[1] !== 'number') {
    throw new Error(`unexpected quota reservation from the dispatch script: ${JSON.stringify(reply)}`)
  }
  const used = reply[1]
  // `used` can exceed a limit lowered mid-window; remaining never goes negative.
  return { allowed: reply[0] === 1, used, remaining: Math.max(0, limit - used), resetMs: slot.resetMs, windowId: slot.windowId }
}

/**
 * Quota store shared by every instance through Redis. Each window's count is one key,
 * `quota:{<scope>}:<windowId>`; the scope is the hash tag so all of a tenant's counters live on
 * one Cluster slot. Units are taken by the dispatch script (lib/state/redis/admission.ts); a
 * refund is a single script, hence atomic across instances. Failures (Redis down) reject
 * promptly as long as the client is built to fail fast; the caller maps them to 503.
 */
export class RedisQuotaStore implements QuotaStore {
  readonly #client: RedisClient
  readonly #commands: QuotaCommands

  constructor (client: RedisClient) {
    this.#client = client
    // defineCommand runs EVALSHA and falls back to EVAL when the server lacks the script
    // (first use, restart, failover), so the script is sent in full only when needed.
    client.defineCommand(REFUND_COMMAND, { lua: COUNTER_REFUND_LUA, numberOfKeys: COUNTER_REFUND_ARGS.keys.length })
    this.#commands = client as unknown as QuotaCommands
  }

  async refund (scope: string, windowId: string, share: string | null = null): Promise<void> {
    assertScope(scope)
    const { keys } = packArgs(COUNTER_REFUND_ARGS, { counter: quotaKey(scope, share, windowId) })
    await storeUndo('quota refund', async () => await this.#commands[REFUND_COMMAND](...keys))
  }

  async usage (scope: string, window: QuotaWindow, nowMs: number, share: string | null = null): Promise<QuotaUsage> {
    const slot = quotaSlot(scope, window, nowMs, share)
    const value = await storeCall('quota usage', async () => await this.#client.get(slot.key))
    return { used: value === null ? 0 : Number(value), resetMs: slot.resetMs, windowId: slot.windowId }
  }
}
