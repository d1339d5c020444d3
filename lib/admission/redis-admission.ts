import { quotaDecision, quotaSlot, RESERVE_QUOTA_LUA } from '../quota/redis-quota-store.js'
import type { RedisClient } from '../redis/client.js'
import { storeCall } from '../store-errors.js'
import { TOKEN_LUA } from '../tokens/redis-token-store.js'
import type { AdmissionStore, DispatchCounts, Exceeded, VerifyCounts } from './gate.js'
import { LOCKOUT_LUA } from './lockout.js'
import type { DispatchPlan, LimitHit, VerifyPlan } from './plan.js'
import { HIT_LIMIT_LUA, type WindowCount } from './velocity.js'

const DISPATCH = { issued: 0, collision: 1, locked: 2, limited: 3, quotaExceeded: 4 } as const
const VERIFY = { limited: 0, missing: 1, mismatch: 2, verified: 3 } as const

/*
 * Both scripts are assembled from the Lua functions of the concerns they decide: velocity
 * (velocity.ts), lockout (lockout.ts), quota reservation (lib/quota/redis-quota-store.ts) and
 * the token write and take (lib/tokens/redis-token-store.ts). They touch only keys of one hash
 * slot: every key carries the `{tenant:mode}` hash tag, so they run on a Cluster too. The
 * verify script builds the lockout key from the tag it reads in the token (it cannot be
 * declared beforehand); the prefix it is given carries the same hash tag, so that key lives
 * in the token's slot.
 */

/** Counts every limit; returns the counts and the 1-based index of the first one exceeded (0: none). */
const HIT_LIMITS_LUA = `
local function hitLimits (firstKey, firstArg, reply)
  local exceeded = 0
  for i = firstKey, #KEYS do
    local arg = firstArg + 2 * (i - firstKey)
    local current, ttl = hitLimit(KEYS[i], ARGV[arg + 1])
    reply[#reply + 1] = current
    reply[#reply + 1] = ttl
    if exceeded == 0 and current > tonumber(ARGV[arg]) then exceeded = i - firstKey + 1 end
  end
  return exceeded
end
`

/**
 * KEYS: token, lockout, quota counter, then one bucket per limit.
 * ARGV: record, token TTL ms, lockout threshold, quota limit, quota expiry (epoch ms), then
 * max and window ms per limit.
 * Reply: { verdict, lockout reset ms or exceeded limit, quota allowed 0|1, quota used, then
 * count and ms left per limit }.
 */
const DISPATCH_LUA = `${HIT_LIMIT_LUA}${HIT_LIMITS_LUA}${LOCKOUT_LUA}${RESERVE_QUOTA_LUA}${TOKEN_LUA}
if tokenExists(KEYS[1]) then return { ${DISPATCH.collision} } end
local reply = { ${DISPATCH.issued}, 0, 0, 0 }
local exceeded = hitLimits(4, 6, reply)
local failures, lockoutResetMs = lockoutFailures(KEYS[2])
if failures >= tonumber(ARGV[3]) then
  reply[1] = ${DISPATCH.locked}
  reply[2] = lockoutResetMs
  return reply
end
if exceeded > 0 then
  reply[1] = ${DISPATCH.limited}
  reply[2] = exceeded
  return reply
end
local allowed, used = reserveQuota(KEYS[3], tonumber(ARGV[4]), ARGV[5])
reply[3] = allowed
reply[4] = used
if allowed == 0 then
  reply[1] = ${DISPATCH.quotaExceeded}
  return reply
end
writeToken(KEYS[1], ARGV[1], ARGV[2])
return reply
`

/**
 * KEYS: token, then one bucket per limit.
 * ARGV: lockout key prefix, lockout window ms, number of stored forms n, the n stored forms,
 * then max and window ms per limit.
 * Reply: { verdict, exceeded limit, then count and ms left per limit }.
 *
 * The comparison is plain string equality on keyed hashes: its timing could only tell how
 * much of HMAC(guess) matches HMAC(code), which says nothing about the code without the key,
 * and the token is gone after this one try anyway.
 */
const VERIFY_LUA = `${HIT_LIMIT_LUA}${HIT_LIMITS_LUA}${LOCKOUT_LUA}${TOKEN_LUA}
local forms = tonumber(ARGV[3])
local reply = { ${VERIFY.limited}, 0 }
local exceeded = hitLimits(2, forms + 4, reply)
if exceeded > 0 then
  reply[2] = exceeded
  return reply
end
local record = takeToken(KEYS[1])
if not record then
  reply[1] = ${VERIFY.missing}
  return reply
end
local stored, tag = string.match(record, '^(.*)|([^|]*)$')
local verified = false
for f = 1, forms do
  if ARGV[3 + f] == stored then verified = true end
end
reply[1] = ${VERIFY.mismatch}
if tag == nil then return reply end
local lockoutKey = ARGV[1] .. tag
if verified then
  redis.call('DEL', lockoutKey)
  reply[1] = ${VERIFY.verified}
else
  recordFailure(lockoutKey, ARGV[2])
end
return reply
`

const DISPATCH_COMMAND = 'emailOtpAdmitDispatch'
const VERIFY_COMMAND = 'emailOtpAdmitVerify'

/**
 * The methods defineCommand adds (keys count first: the number of limits varies). Arguments
 * go as strings: ioredis encodes a number argument several microseconds slower per call.
 */
interface AdmissionCommands {
  [DISPATCH_COMMAND](numberOfKeys: string, ...keysAndArgs: string[]): Promise<unknown>
  [VERIFY_COMMAND](numberOfKeys: string, ...keysAndArgs: string[]): Promise<unknown>
}

function unexpected (what: string, reply: unknown): Error {
  return new Error(`unexpected reply from the ${what} admission script: ${JSON.stringify(reply)}`)
}

function numbers (reply: unknown, what: string): number[] {
  if (!Array.isArray(reply) || !reply.every((value) => typeof value === 'number')) throw unexpected(what, reply)
  return reply as number[]
}

function counts (reply: readonly number[], from: number): WindowCount[] {
  const result: WindowCount[] = []
  for (let index = from; index + 1 < reply.length; index += 2) result.push({ current: reply[index] as number, ttlMs: reply[index + 1] as number })
  return result
}

/** The limit a script reported exceeded (its 1-based index), checked against the plan. */
function exceededLimit (limits: readonly LimitHit[], hits: readonly WindowCount[], index: number | undefined, what: string, reply: unknown): Exceeded {
  const position = (index ?? 0) - 1
  const limit = limits[position]
  const count = hits[position]
  if (limit === undefined || count === undefined) throw unexpected(what, reply)
  return { limit, count }
}

/**
 * Admission in Redis: a dispatch or a verify is one EVALSHA (ioredis loads the script on
 * first use and after a restart or failover), atomic across every instance.
 */
export class RedisAdmission implements AdmissionStore {
  readonly #commands: AdmissionCommands

  constructor (client: RedisClient) {
    client.defineCommand(DISPATCH_COMMAND, { lua: DISPATCH_LUA })
    client.defineCommand(VERIFY_COMMAND, { lua: VERIFY_LUA })
    this.#commands = client as unknown as AdmissionCommands
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchCounts> {
    const { limits, lockout, quota, token } = plan
    const slot = quotaSlot(quota.scope, quota.window, quota.nowMs)
    const keys = [token.key, lockout.key, slot.key]
    const args = [token.record, String(token.ttlMs), String(lockout.threshold), String(quota.limit), String(slot.expireAtMs)]
    for (const limit of limits) {
      keys.push(limit.bucket)
      args.push(String(limit.max), String(limit.windowMs))
    }
    const raw = await storeCall('dispatch admission', async () => await this.#commands[DISPATCH_COMMAND](String(keys.length), ...keys, ...args))
    const reply = numbers(raw, 'dispatch')
    const verdict = reply[0]
    if (verdict === DISPATCH.collision) return { kind: 'collision' }
    const hits = counts(reply, 4)
    if (verdict === DISPATCH.locked) return { kind: 'locked', counts: hits, lockoutResetMs: reply[1] ?? 0 }
    if (verdict === DISPATCH.limited) return { kind: 'limited', counts: hits, exceeded: exceededLimit(limits, hits, reply[1], 'dispatch', raw) }
    const decision = quotaDecision([reply[2], reply[3]], quota.limit, slot)
    return verdict === DISPATCH.quotaExceeded
      ? { kind: 'quota_exceeded', counts: hits, quota: decision }
      : { kind: 'issued', counts: hits, quota: decision }
  }

  async verify (plan: VerifyPlan): Promise<VerifyCounts> {
    const keys = [plan.tokenKey]
    const args = [plan.lockout.keyPrefix, String(plan.lockout.windowMs), String(plan.storedForms.length), ...plan.storedForms]
    for (const limit of plan.limits) {
      keys.push(limit.bucket)
      args.push(String(limit.max), String(limit.windowMs))
    }
    const raw = await storeCall('verify admission', async () => await this.#commands[VERIFY_COMMAND](String(keys.length), ...keys, ...args))
    const reply = numbers(raw, 'verify')
    const hits = counts(reply, 2)
    switch (reply[0]) {
      case VERIFY.limited: return { kind: 'limited', counts: hits, exceeded: exceededLimit(plan.limits, hits, reply[1], 'verify', raw) }
      case VERIFY.missing: return { kind: 'missing', counts: hits }
      case VERIFY.verified: return { kind: 'verified', counts: hits }
      case VERIFY.mismatch: return { kind: 'mismatch', counts: hits }
      default: throw unexpected('verify', raw)
    }
  }
}
