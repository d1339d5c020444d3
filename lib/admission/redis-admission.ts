import { LOCKOUT_LUA } from './lockout.js'
import { quotaDecision, quotaSlot, RESERVE_QUOTA_LUA } from '../quota/redis-quota-store.js'
import { HIT_LIMIT_LUA } from './velocity.js'
import type { RedisClient } from '../redis/client.js'
import { storeCall } from '../store-errors.js'
import type { Admission, DispatchPlan, DispatchVerdict, LimitCount, VerifyPlan, VerifyVerdict } from './admission.js'

const DISPATCH = { issued: 0, collision: 1, locked: 2, limited: 3, quotaExceeded: 4 } as const
const VERIFY = { limited: 0, missing: 1, mismatch: 2, verified: 3 } as const

/*
 * Both scripts touch only keys of one hash slot: every key carries the `{tenant:mode}` hash
 * tag, so they run on a Cluster too. The verify script builds the lockout key from the tag it
 * reads in the token (it cannot be declared beforehand); the prefix it is given carries the
 * same hash tag, so that key lives in the token's slot.
 */

/**
 * KEYS: token, lockout, quota counter, then one bucket per limit.
 * ARGV: record, token TTL ms, lockout threshold, quota limit, quota expiry (epoch ms), then
 * max and window ms per limit.
 * Reply: { verdict, lockout reset ms, quota allowed 0|1, quota used, then count and ms left
 * per limit }.
 */
const DISPATCH_LUA = `${HIT_LIMIT_LUA}${LOCKOUT_LUA}${RESERVE_QUOTA_LUA}
if redis.call('EXISTS', KEYS[1]) == 1 then return { ${DISPATCH.collision} } end
local reply = { ${DISPATCH.issued}, 0, 0, 0 }
local exceeded = false
for i = 4, #KEYS do
  local max = tonumber(ARGV[2 * i - 2])
  local current, ttl = hitLimit(KEYS[i], ARGV[2 * i - 1])
  reply[#reply + 1] = current
  reply[#reply + 1] = ttl
  if current > max then exceeded = true end
end
local failures, lockoutResetMs = lockoutFailures(KEYS[2])
if failures >= tonumber(ARGV[3]) then
  reply[1] = ${DISPATCH.locked}
  reply[2] = lockoutResetMs
  return reply
end
if exceeded then
  reply[1] = ${DISPATCH.limited}
  return reply
end
local allowed, used = reserveQuota(KEYS[3], tonumber(ARGV[4]), ARGV[5])
reply[3] = allowed
reply[4] = used
if allowed == 0 then
  reply[1] = ${DISPATCH.quotaExceeded}
  return reply
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return reply
`

/**
 * KEYS: token, then one bucket per limit.
 * ARGV: lockout key prefix, lockout window ms, number of stored forms n, the n stored forms,
 * then max and window ms per limit.
 * Reply: { verdict, recipient failures, lockout ms left, address hash (or ''), then count and
 * ms left per limit }; failures and ms left are 0 but after a wrong guess.
 *
 * The comparison is plain string equality on keyed hashes: its timing could only tell how
 * much of HMAC(guess) matches HMAC(code), which says nothing about the code without the key,
 * and the token is gone after this one try anyway.
 */
const VERIFY_LUA = `${HIT_LIMIT_LUA}${LOCKOUT_LUA}
local forms = tonumber(ARGV[3])
local reply = { ${VERIFY.limited}, 0, 0, '' }
local exceeded = false
for i = 2, #KEYS do
  local max = tonumber(ARGV[forms + 2 * i])
  local current, ttl = hitLimit(KEYS[i], ARGV[forms + 2 * i + 1])
  reply[#reply + 1] = current
  reply[#reply + 1] = ttl
  if current > max then exceeded = true end
end
if exceeded then return reply end
local record = redis.call('GETDEL', KEYS[1])
if not record then
  reply[1] = ${VERIFY.missing}
  return reply
end
local stored, tag, hash = string.match(record, '^([^|]*)|([^|]*)|?([^|]*)$')
local verified = false
for f = 1, forms do
  if ARGV[3 + f] == stored then verified = true end
end
reply[1] = ${VERIFY.mismatch}
if tag == nil then return reply end
reply[4] = hash
local lockoutKey = ARGV[1] .. tag
if verified then
  redis.call('DEL', lockoutKey)
  reply[1] = ${VERIFY.verified}
else
  reply[2] = recordFailure(lockoutKey, ARGV[2])
  reply[3] = redis.call('PTTL', lockoutKey)
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

function numbers (reply: unknown, what: string): number[] {
  if (!Array.isArray(reply) || !reply.every((value) => typeof value === 'number')) {
    throw new Error(`unexpected reply from the ${what} script: ${JSON.stringify(reply)}`)
  }
  return reply as number[]
}

function counts (reply: readonly number[], from: number): LimitCount[] {
  const result: LimitCount[] = []
  for (let index = from; index + 1 < reply.length; index += 2) result.push({ current: reply[index] as number, ttlMs: reply[index + 1] as number })
  return result
}

/**
 * Admission in Redis: a dispatch or a verify is one EVALSHA (ioredis loads the script on
 * first use and after a restart or failover), atomic across every instance.
 */
export class RedisAdmission implements Admission {
  readonly #commands: AdmissionCommands

  constructor (client: RedisClient) {
    client.defineCommand(DISPATCH_COMMAND, { lua: DISPATCH_LUA })
    client.defineCommand(VERIFY_COMMAND, { lua: VERIFY_LUA })
    this.#commands = client as unknown as AdmissionCommands
  }

  async dispatch (plan: DispatchPlan): Promise<DispatchVerdict> {
    const { limits, lockout, quota, token } = plan
    const slot = quotaSlot(quota.scope, quota.window, quota.nowMs)
    const keys = [token.key, lockout.key, slot.key]
    const args = [token.record, String(token.ttlMs), String(lockout.threshold), String(quota.limit), String(slot.expireAtMs)]
    for (const limit of limits) {
      keys.push(limit.bucket)
      args.push(String(limit.max), String(limit.windowMs))
    }
    const reply = numbers(await storeCall('dispatch admission', async () => await this.#commands[DISPATCH_COMMAND](String(keys.length), ...keys, ...args)), 'dispatch')
    const verdict = reply[0]
    if (verdict === DISPATCH.collision) return { kind: 'collision' }
    const hits = counts(reply, 4)
    if (verdict === DISPATCH.locked) return { kind: 'locked', counts: hits, lockoutResetMs: reply[1] ?? 0 }
    if (verdict === DISPATCH.limited) return { kind: 'limited', counts: hits }
    const decision = quotaDecision([reply[2], reply[3]], quota.limit, slot)
    return verdict === DISPATCH.quotaExceeded
      ? { kind: 'quota_exceeded', counts: hits, quota: decision }
      : { kind: 'issued', counts: hits, quota: decision }
  }

  async verify (plan: VerifyPlan): Promise<VerifyVerdict> {
    const keys = [plan.tokenKey]
    const args = [plan.lockout.keyPrefix, String(plan.lockout.windowMs), String(plan.storedForms.length), ...plan.storedForms]
    for (const limit of plan.limits) {
      keys.push(limit.bucket)
      args.push(String(limit.max), String(limit.windowMs))
    }
    const raw = await storeCall('verify admission', async () => await this.#commands[VERIFY_COMMAND](String(keys.length), ...keys, ...args))
    // The fourth element is the address hash, a string: checked apart from the numbers.
    const hash = Array.isArray(raw) ? raw[3] as unknown : undefined
    if (typeof hash !== 'string') throw new Error(`unexpected reply from the verify script: ${JSON.stringify(raw)}`)
    const reply = numbers([...(raw as unknown[]).slice(0, 3), ...(raw as unknown[]).slice(4)], 'verify')
    const hits = counts(reply, 3)
    const addressHash = hash === '' ? null : hash
    switch (reply[0]) {
      case VERIFY.limited: return { kind: 'limited', counts: hits }
      case VERIFY.missing: return { kind: 'missing', counts: hits }
      case VERIFY.verified: return { kind: 'verified', counts: hits, addressHash }
      default: return { kind: 'mismatch', counts: hits, addressHash, failures: reply[1] ?? 0, lockoutResetMs: reply[2] ?? 0 }
    }
  }
}
