import { TOKEN_RECORD_SEPARATOR } from '../tokens.js'
import { LISTED_PER_TYPE } from '../verification-log.js'
import { BUCKET_MS, COUNTED_BY, DURATION_BOUNDS_SECONDS, ONCE_COUNTED } from '../insights.js'
import { FENCE_LUA, UNDO_SHEBANG, WRITES_SHEBANG } from './fence.js'
import { count, flag, key, keys, luaPrologue, number, scriptArgs, text, texts, tuples } from './script-args.js'

/*
 * Every Lua script the service runs on Redis, in one module: the functions several scripts
 * share (velocity, lockout, token, quota reservation) and each whole script, which its store
 * defines once on the client (ioredis defineCommand: EVALSHA, falling back to EVAL when the
 * server lacks it). A state-changing script starts with the fence (fence.ts); one that only
 * gives back starts with UNDO_SHEBANG. The admission scripts' arguments are named once
 * (script-args.ts): the store packs them by name, and the script reads them as Lua locals.
 */

/* Velocity and lockout (functions of the admission scripts; their in-process twins are in lib/state/memory). */

/**
 * One hit, as a Lua function for scripts that check several limits in one round trip: INCR,
 * and PEXPIRE on the first hit of a window.
 */
export const HIT_LIMIT_LUA = `
local function hitLimit (key, windowMs)
  local current = redis.call('INCR', key)
  if current == 1 then
    redis.call('PEXPIRE', key, windowMs)
    return current, tonumber(windowMs)
  end
  return current, redis.call('PTTL', key)
end
`

/**
 * The state as a Redis hash `{ f: failures, u: locked until (epoch ms) }`. The clock is
 * Redis's own (TIME), so every instance agrees on when a lock ends.
 *
 * - `lockoutNow()`: milliseconds since the epoch, by the server.
 * - `lockedFor(key, now)`: ms left on the mailbox's lock, 0 when it is not locked.
 * - `recordFailure(key, now, threshold, baseMs, maxMs, resetAfterMs)`: one more failure; returns
 *   the ms of the lock it starts (0 when none).
 * - `clearLockout(key)`: a right guess, or a tenant clearing the lock.
 */
export const LOCKOUT_LUA = `
local function lockoutNow ()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local function lockedFor (key, now)
  local lockedUntil = tonumber(redis.call('HGET', key, 'u') or '0')
  if lockedUntil > now then return lockedUntil - now end
  return 0
end
local function recordFailure (key, now, threshold, baseMs, maxMs, resetAfterMs)
  local failures = redis.call('HINCRBY', key, 'f', 1)
  local lockMs = 0
  if failures >= threshold then
    lockMs = math.min(maxMs, baseMs * 2 ^ math.min(failures - threshold, 60))
    redis.call('HSET', key, 'u', now + lockMs)
  end
  redis.call('PEXPIRE', key, lockMs + resetAfterMs)
  return lockMs
end
local function clearLockout (key)
  return redis.call('DEL', key)
end
`

/* The token write and take (functions of the admission scripts). */

/**
 * The token write and take as Lua functions, for the admission scripts that fold them into
 * a dispatch's or a verify's one round trip (lib/state/redis/admission.ts):
 * `tokenExists` before anything is counted (a taken requestId is a retry with a new one),
 * `writeToken` with its expiry in one SET, `readToken` and `setTokenAside` in the same script,
 * so a code is consumed atomically by the first verify, right or wrong, and a verify refused
 * between the two (the key's bucket) leaves it in place. A consumed token is renamed, not
 * deleted: under a name of that verify's own, with the expiry it had, so that a verify whose
 * answer never reached its caller (who answered 503) can put the code back for the retry.
 */
const TOKEN_LUA = `
local function tokenExists (key)
  return redis.call('EXISTS', key) == 1
end
local function writeToken (key, record, ttlMs)
  redis.call('SET', key, record, 'PX', ttlMs)
end
local function readToken (key)
  return redis.call('GET', key)
end
local function setTokenAside (key, attempt)
  redis.call('RENAME', key, key .. ':used:' .. attempt)
end
`

/* Quota reservation (a function of the dispatch script) and refund (lib/state/redis/quota-store.ts, and a tenant's mailbox count: lib/state/redis/admission.ts). */

/**
 * Takes a unit of every counter or of none (a restricted key's share and its tenant's whole
 * allowance): KEYS[first + i - 1] with limit and expiry in ARGV[firstArg + 2(i - 1)] and the
 * next one, for i = 1..count. It returns allowed 0|1 and the count of the first counter (the
 * tenant's, which the Quota-* headers describe). Checking before INCR (rather than INCR then
 * DECR on refusal) keeps refused calls from ever changing the counts. PEXPIREAT is set on
 * every grant, not only the first, so a counter that somehow lost its expiry still gets one.
 */
const RESERVE_QUOTA_LUA = `
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
/** A counter a dispatch took a unit of: a quota counter, or a tenant's mailbox count. */
export const COUNTER_REFUND_ARGS = scriptArgs({ keys: [key('counter')], argv: [] })
/**
 * COUNTER_REFUND_ARGS. A missing key means the window is over (or never counted anything), and
 * recreating it would leave a counter without an expiry, so that is a no-op. DECR keeps the TTL.
 * Not fenced, and run at Redis's memory limit too: a refund that lands late, or on a full
 * Redis, only brings the count closer to the mail that left.
 */
export const COUNTER_REFUND_LUA = `${UNDO_SHEBANG}${luaPrologue(COUNTER_REFUND_ARGS)}local used = tonumber(redis.call('GET', counter) or '0')
if used > 0 then
  redis.call('DECR', counter)
end
return 0
`

/* Admission: dispatch, verify, refused requests, the mailbox bucket, undo and restore (lib/state/redis/admission.ts). */

/** The dispatch script's first reply, read by lib/state/redis/admission.ts. */
export const DISPATCH = { issued: 0, collision: 1, locked: 2, limited: 3, quotaExceeded: 4, mailboxLimited: 5, suppressed: 6, withheld: 7 } as const
/** The verify script's first reply. */
export const VERIFY = { limited: 0, missing: 1, mismatch: 2, verified: 3, locked: 4 } as const

/**
 * Counts KEYS[first..last] with max and window ms in ARGV[firstArg + 2(i - first)] and the
 * next, in order, up to the first one exceeded; appends count and ms left of each to `reply`.
 * Returns the 1-based position of the exceeded limit (0: none).
 */
const HIT_LIMITS_LUA = `
local function hitLimits (first, last, firstArg, reply)
  for i = first, last do
    local arg = firstArg + 2 * (i - first)
    local current, ttl = hitLimit(KEYS[i], ARGV[arg + 1])
    reply[#reply + 1] = current
    reply[#reply + 1] = ttl
    if current > tonumber(ARGV[arg]) then return i - first + 1 end
  end
  return 0
end
`
/** Whether a mailbox's suppression key is set (it expires with the suppression). */
const SUPPRESSION_LUA = `
local function suppressed (key)
  return redis.call('EXISTS', key) == 1
end
`
/**
 * The dispatch's token, lockout, quota counters (tenant, then a key's share), the mailbox
 * bucket when counted here, the tenant's mailbox count when the cap is on (`reserve`: the count
 * its reserve inside the cap is measured by, in the tenant's slot), one bucket per limit (the
 * caller's own, then the shared ones), the mailbox's suppression; the record, its TTL, how many
 * of the limits are the caller's own, what a suppression does (withhold rather than refuse), and
 * each counter's and bucket's limit and expiry (the reserve's: its size and the cap's window).
 */
export const DISPATCH_ARGS = scriptArgs({
  keys: [key('tokenKey'), key('lockoutKey'), keys('quotas'), keys('mailbox'), keys('reserve'), keys('limits'), key('suppressionKey')],
  argv: [
    text('record'), number('ttlMs'), count('quotas'), count('mailbox'), count('reserve'), number('ownLimits'), flag('withhold'),
    tuples('quotaArgs', ['limit', 'expireAtMs'], 'quotas'), tuples('mailboxArgs', ['max', 'windowMs'], 'mailbox'),
    tuples('reserveArgs', ['max', 'windowMs'], 'reserve'), tuples('limitArgs', ['max', 'windowMs'], 'limits')
  ]
})
/**
 * DISPATCH_ARGS. Reply: { verdict, then by verdict: lock ms left | exceeded limit | mailbox count
 * | 1 when admitted within the tenant's reserve (else 0), quota allowed 0|1 | mailbox ms left,
 * quota used, then count and ms left per limit counted }. A withheld dispatch replies like an
 * issued one, under its own verdict. The tenant's mailbox count is read before the cap and
 * counted with the token, in this one step: two dispatches of a tenant never both take its
 * last unit of reserve, and only a dispatch that wrote its token counted it (the undo gives it
 * back on that condition).
 */
export const DISPATCH_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${HIT_LIMIT_LUA}${HIT_LIMITS_LUA}${LOCKOUT_LUA}${SUPPRESSION_LUA}${RESERVE_QUOTA_LUA}${TOKEN_LUA}${luaPrologue(DISPATCH_ARGS)}
if tokenExists(tokenKey) then return { ${DISPATCH.collision} } end
local reply = { ${DISPATCH.issued}, 0, 0, 0 }
local exceeded = hitLimits(limitsAt, limitsAt + ownLimits - 1, limitArgsAt, reply)
if exceeded > 0 then
  reply[1] = ${DISPATCH.limited}
  reply[2] = exceeded
  return reply
end
local lockedMs = lockedFor(lockoutKey, lockoutNow())
if lockedMs > 0 then
  reply[1] = ${DISPATCH.locked}
  reply[2] = lockedMs
  return reply
end
if not withhold and suppressed(suppressionKey) then
  reply[1] = ${DISPATCH.suppressed}
  return reply
end
exceeded = hitLimits(limitsAt + ownLimits, limitsAt + limitsCount - 1, limitArgsAt + 2 * ownLimits, reply)
if exceeded > 0 then
  reply[1] = ${DISPATCH.limited}
  reply[2] = ownLimits + exceeded
  return reply
end
local withinReserve = false
if reserveCount == 1 then withinReserve = tonumber(redis.call('GET', KEYS[reserveAt]) or '0') < tonumber(ARGV[reserveArgsAt]) end
if mailboxCount == 1 then
  local current, ttl = hitLimit(KEYS[mailboxAt], ARGV[mailboxArgsAt + 1])
  if current > tonumber(ARGV[mailboxArgsAt]) and not withinReserve then
    reply[1] = ${DISPATCH.mailboxLimited}
    reply[2] = current
    reply[3] = ttl
    return reply
  end
end
local allowed, used = reserveQuotas(quotasAt, quotasCount, quotaArgsAt)
reply[3] = allowed
reply[4] = used
if allowed == 0 then
  reply[1] = ${DISPATCH.quotaExceeded}
  return reply
end
writeToken(tokenKey, record, ttlMs)
if reserveCount == 1 then
  hitLimit(KEYS[reserveAt], ARGV[reserveArgsAt + 1])
  if withinReserve then reply[2] = 1 end
end
if withhold and suppressed(suppressionKey) then reply[1] = ${DISPATCH.withheld} end
return reply
`
/** A mailbox bucket counted on its own (on a Cluster), with its max and window. */
export const MAILBOX_ARGS = scriptArgs({ keys: [key('bucketKey')], argv: [number('max'), number('windowMs')] })
/** MAILBOX_ARGS. Reply: { count, ms left }. */
export const MAILBOX_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${HIT_LIMIT_LUA}${luaPrologue(MAILBOX_ARGS)}
return { hitLimit(bucketKey, windowMs) }
`
/** An admitted dispatch's token and the counters it took a unit of: its quota counters, its tenant's mailbox count. */
export const UNDO_DISPATCH_ARGS = scriptArgs({ keys: [key('tokenKey'), keys('counters')], argv: [] })
/**
 * UNDO_DISPATCH_ARGS. Takes back an admitted dispatch: the token, and a unit of each counter,
 * if the token is there (it is only if this dispatch wrote it: its requestId was never told to
 * anyone).
 */
export const UNDO_DISPATCH_LUA = `${UNDO_SHEBANG}${luaPrologue(UNDO_DISPATCH_ARGS)}if redis.call('DEL', tokenKey) == 0 then return { 0 } end
for i = countersAt, countersAt + countersCount - 1 do
  if tonumber(redis.call('GET', KEYS[i]) or '0') > 0 then redis.call('DECR', KEYS[i]) end
end
return { 1 }
`
/** A token, and the verify attempt that set it aside. */
export const RESTORE_TOKEN_ARGS = scriptArgs({ keys: [key('tokenKey')], argv: [text('attempt')] })
/** RESTORE_TOKEN_ARGS. Puts back the token that attempt set aside, if it is still there. */
export const RESTORE_TOKEN_LUA = `${UNDO_SHEBANG}${luaPrologue(RESTORE_TOKEN_ARGS)}local aside = tokenKey .. ':used:' .. attempt
if redis.call('EXISTS', aside) == 0 or redis.call('EXISTS', tokenKey) == 1 then return { 0 } end
redis.call('RENAME', aside, tokenKey)
return { 1 }
`
/**
 * The verify's token, one bucket per limit (the caller's own, then the shared ones, counted
 * only when the requestId has a live code); the lockout key prefix, the lockout policy, how
 * many of the limits are the caller's own, the stored forms of the guess, each bucket's max and
 * window, and the attempt's id (under which the token is set aside once consumed).
 */
export const VERIFY_ARGS = scriptArgs({
  keys: [key('tokenKey'), keys('limits')],
  argv: [
    text('lockoutPrefix'), number('threshold'), number('baseMs'), number('maxMs'), number('resetAfterMs'), count('forms'), number('ownLimits'),
    texts('forms'), tuples('limitArgs', ['max', 'windowMs'], 'limits'), text('attempt')
  ]
})
/**
 * VERIFY_ARGS. Reply: { verdict, exceeded limit, lock started ms, address hash ('' for none),
 * then count and ms left per limit counted }.
 *
 * The comparison is plain string equality on keyed hashes: its timing could only tell how
 * much of HMAC(guess) matches HMAC(code), which says nothing about the code without the key,
 * and the token is gone after this one try anyway.
 */
export const VERIFY_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${HIT_LIMIT_LUA}${HIT_LIMITS_LUA}${LOCKOUT_LUA}${TOKEN_LUA}${luaPrologue(VERIFY_ARGS)}
local reply = { ${VERIFY.limited}, 0, 0, '' }
local exceeded = hitLimits(limitsAt, limitsAt + ownLimits - 1, limitArgsAt, reply)
if exceeded > 0 then
  reply[2] = exceeded
  return reply
end
local record = readToken(tokenKey)
if not record then
  reply[1] = ${VERIFY.missing}
  return reply
end
exceeded = hitLimits(limitsAt + ownLimits, limitsAt + limitsCount - 1, limitArgsAt + 2 * ownLimits, reply)
if exceeded > 0 then
  reply[2] = ownLimits + exceeded
  return reply
end
setTokenAside(tokenKey, attempt)
local stored, tag, hash = string.match(record, '^([^${TOKEN_RECORD_SEPARATOR}]*)${TOKEN_RECORD_SEPARATOR}([^${TOKEN_RECORD_SEPARATOR}]*)${TOKEN_RECORD_SEPARATOR}([^${TOKEN_RECORD_SEPARATOR}]*)$')
if stored == nil then stored, tag = string.match(record, '^([^${TOKEN_RECORD_SEPARATOR}]*)${TOKEN_RECORD_SEPARATOR}([^${TOKEN_RECORD_SEPARATOR}]*)$') end
reply[1] = ${VERIFY.mismatch}
if tag == nil then return reply end
reply[4] = hash or ''
local lockoutKey = lockoutPrefix .. tag
local now = lockoutNow()
if lockedFor(lockoutKey, now) > 0 then
  reply[1] = ${VERIFY.locked}
  return reply
end
local verified = false
for f = formsAt, formsAt + formsCount - 1 do
  if ARGV[f] == stored then verified = true end
end
if verified then
  clearLockout(lockoutKey)
  reply[1] = ${VERIFY.verified}
else
  reply[3] = recordFailure(lockoutKey, now, threshold, baseMs, maxMs, resetAfterMs)
end
return reply
`
/** One bucket per limit, with its max and window. */
export const COUNT_ARGS = scriptArgs({ keys: [keys('limits')], argv: [tuples('limitArgs', ['max', 'windowMs'], 'limits')] })
/** COUNT_ARGS. Reply: { exceeded limit, then counts }. */
export const COUNT_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${HIT_LIMIT_LUA}${HIT_LIMITS_LUA}${luaPrologue(COUNT_ARGS)}
local reply = { 0 }
reply[1] = hitLimits(limitsAt, limitsAt + limitsCount - 1, limitArgsAt, reply)
return reply
`

/* Idempotency-Key records (lib/state/redis/idempotency-store.ts). */

/*
 * The record is a hash: fingerprint, attempt (whose claim or answer it is), sending (set once
 * that attempt may have sent), response (once answered). Records of earlier versions have
 * only fingerprint and response, and read as an attempt that never marked sending.
 */

/** A key's record and its claim's lock; the request's fingerprint, the attempt, how long the record and the claim live. */
export const IDEMPOTENCY_BEGIN_ARGS = scriptArgs({ keys: [key('record'), key('lock')], argv: [text('fingerprint'), text('attempt'), number('ttlMs'), number('lockMs')] })
/** IDEMPOTENCY_BEGIN_ARGS. Returns { state, response? }. */
export const IDEMPOTENCY_BEGIN_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${luaPrologue(IDEMPOTENCY_BEGIN_ARGS)}local stored = redis.call('HMGET', record, 'fingerprint', 'response', 'sending')
if stored[1] then
  if stored[1] ~= fingerprint then return { 'mismatch' } end
  if stored[2] then return { 'replay', stored[2] } end
  if redis.call('EXISTS', lock) == 1 then return { 'in_flight' } end
  -- An attempt that may have sent is never run again: its answer is unknown until it is recorded.
  if stored[3] then return { 'unknown' } end
  -- The claim lapsed before its owner could send: its owner died, this retry takes over.
end
redis.call('HSET', record, 'fingerprint', fingerprint, 'attempt', attempt)
redis.call('PEXPIRE', record, ttlMs)
redis.call('SET', lock, '1', 'PX', lockMs)
return { 'started' }
`
/** A key's record; the attempt that may now send. */
export const IDEMPOTENCY_SENDING_ARGS = scriptArgs({ keys: [key('record')], argv: [text('attempt')] })
/** IDEMPOTENCY_SENDING_ARGS. 1 once marked, 0 when the key is not the attempt's (nothing marked). */
export const IDEMPOTENCY_SENDING_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${luaPrologue(IDEMPOTENCY_SENDING_ARGS)}if redis.call('HGET', record, 'attempt') ~= attempt then return 0 end
redis.call('HSET', record, 'sending', '1')
return 1
`
/** A key's record and lock; the fingerprint, the attempt, its answer (JSON) and how long it is kept. */
export const IDEMPOTENCY_COMPLETE_ARGS = scriptArgs({ keys: [key('record'), key('lock')], argv: [text('fingerprint'), text('attempt'), text('response'), number('ttlMs')] })
/**
 * IDEMPOTENCY_COMPLETE_ARGS. First completion wins.
 * Not fenced: it records the answer the attempt gave, which is true however late it lands, and
 * the attempt check keeps it off a key another attempt took over meanwhile.
 */
export const IDEMPOTENCY_COMPLETE_LUA = `${WRITES_SHEBANG}${luaPrologue(IDEMPOTENCY_COMPLETE_ARGS)}local stored = redis.call('HMGET', record, 'attempt', 'response')
if stored[2] or (stored[1] and stored[1] ~= attempt) then return 0 end
redis.call('HSET', record, 'fingerprint', fingerprint, 'attempt', attempt, 'response', response)
redis.call('PEXPIRE', record, ttlMs)
redis.call('DEL', lock)
return 1
`
/** A key's record and lock; the attempt letting go of its claim. */
export const IDEMPOTENCY_ABANDON_ARGS = scriptArgs({ keys: [key('record'), key('lock')], argv: [text('attempt')] })
/** IDEMPOTENCY_ABANDON_ARGS. Only the attempt's own claim is released; a completed response is kept. */
export const IDEMPOTENCY_ABANDON_LUA = `${UNDO_SHEBANG}${luaPrologue(IDEMPOTENCY_ABANDON_ARGS)}local stored = redis.call('HMGET', record, 'attempt', 'response')
if stored[2] or stored[1] ~= attempt then return 0 end
redis.call('DEL', record, lock)
return 1
`

/* Receipt redemptions and epochs (lib/state/redis/redemption-store.ts). */

/** A scope's epoch key; the epoch to make when there is none. */
export const RECEIPT_EPOCH_ARGS = scriptArgs({ keys: [key('epochKey')], argv: [text('newEpoch')] })
/** RECEIPT_EPOCH_ARGS. The scope's epoch, made once (by whoever asks first) and read back. */
export const RECEIPT_EPOCH_LUA = `
${luaPrologue(RECEIPT_EPOCH_ARGS)}local current = redis.call('GET', epochKey)
if current then return current end
redis.call('SET', epochKey, newEpoch)
return newEpoch
`
/** A scope's epoch key and the receipt's redemption; the receipt's epoch, how long its mark lives, the epoch to make if the key is gone. */
export const RECEIPT_REDEEM_ARGS = scriptArgs({ keys: [key('epochKey'), key('redemptionKey')], argv: [text('epoch'), number('ttlMs'), text('newEpoch')] })
/**
 * RECEIPT_REDEEM_ARGS, then the fence's deadline (lib/state/redis/fence.ts): a redemption
 * answered 503 never marks the receipt later. Reply { 1 redeemed | 2 already redeemed | 0
 * another epoch, the current epoch }.
 */
export const RECEIPT_REDEEM_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${luaPrologue(RECEIPT_REDEEM_ARGS)}local current = redis.call('GET', epochKey)
if not current then
  redis.call('SET', epochKey, newEpoch)
  current = newEpoch
end
if current ~= epoch then return { 0, current } end
if redis.call('SET', redemptionKey, '1', 'PX', ttlMs, 'NX') then return { 1, current } end
return { 2, current }
`

/* The sandbox inbox (lib/state/redis/sandbox-inbox.ts). */

/**
 * The address's box (its list), the tenant's share (sandboxShareKeys: boxes by last write,
 * bytes per box, their total), then the pieces the entry names (sandboxPiecesKey, none to two);
 * the entry, the address, the prefix of the tenant's boxes, messages per address, the retention
 * ms, addresses and bytes per tenant, and for each pieces key its value or '' (kept already, as
 * far as the caller knows). Then the fence's deadline (lib/state/redis/fence.ts).
 */
export const SANDBOX_ADD_ARGS = scriptArgs({
  keys: [key('box'), key('boxes'), key('bytes'), key('total'), keys('pieces')],
  argv: [text('entry'), text('address'), text('boxPrefix'), number('perAddress'), number('retentionMs'), number('maxAddresses'), number('maxBytes'), tuples('pieceValues', ['value'], 'pieces')]
})
/**
 * SANDBOX_ADD_ARGS.
 * Replies 0 once written, or the positions (from 1) of the pieces to send, with nothing
 * written. Each pieces key lives a retention after the last entry that names it, so it
 * outlives every entry a list shows; the pieces are outside the tenant's share, since a
 * tenant makes at most one set a minute per locale whatever it is sent (lib/mail/templating/liquid.ts). A script rather than MULTI: fenced, a message
 * the caller gave up on (its dispatch answered 503 and refunded) never appears later, and with
 * its shebang Redis refuses it whole at its memory limit. The share is trimmed in the same
 * step, so that it never stays over its bounds: the tenant's least recently written boxes go
 * first, never the one just written. A box's bytes are recorded when it is written, since an
 * evicted or expired box's entries are not read again to know what they took.
 */
export const SANDBOX_ADD_LUA = `${WRITES_SHEBANG}${FENCE_LUA}${luaPrologue(SANDBOX_ADD_ARGS)}-- The pieces the entry names: each kept, or sent now; otherwise nothing is written and the
-- caller is told which to send.
local missing = {}
for piece = 0, piecesCount - 1 do
  if ARGV[pieceValuesAt + piece] == '' and redis.call('EXISTS', KEYS[piecesAt + piece]) == 0 then missing[#missing + 1] = piece + 1 end
end
if #missing > 0 then return missing end
for piece = 0, piecesCount - 1 do
  local value = ARGV[pieceValuesAt + piece]
  if value == '' then
    redis.call('PEXPIRE', KEYS[piecesAt + piece], retentionMs)
  else
    redis.call('SET', KEYS[piecesAt + piece], value, 'PX', retentionMs)
  end
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local stored = tonumber(redis.call('GET', total) or '0')
local function forget (member)
  stored = stored - tonumber(redis.call('HGET', bytes, member) or '0')
  redis.call('HDEL', bytes, member)
  redis.call('ZREM', boxes, member)
  redis.call('DEL', boxPrefix .. member)
end
-- Boxes last written a retention ago expired with their lists: out of the share, each once.
for _, expired in ipairs(redis.call('ZRANGE', boxes, '-inf', now - retentionMs, 'BYSCORE')) do forget(expired) end

local recorded = redis.call('HGET', bytes, address)
stored = stored - tonumber(recorded or '0')
-- What the box held: nothing when its list is gone (it expired a moment before its score
-- says), and a list without a record, written by a build without the share, is measured once.
local size = 0
if redis.call('EXISTS', box) == 1 then
  if recorded then
    size = tonumber(recorded)
  else
    for _, kept in ipairs(redis.call('LRANGE', box, 0, -1)) do size = size + #kept end
  end
end
redis.call('LPUSH', box, entry)
size = size + #entry
for _, dropped in ipairs(redis.call('LRANGE', box, perAddress, -1)) do size = size - #dropped end
redis.call('LTRIM', box, 0, perAddress - 1)
redis.call('PEXPIRE', box, retentionMs)
stored = stored + size
redis.call('HSET', bytes, address, size)
redis.call('ZADD', boxes, now, address)

local addresses = redis.call('ZCARD', boxes)
local position = 0
while addresses > maxAddresses or stored > maxBytes do
  local oldest = redis.call('ZRANGE', boxes, position, position)[1]
  if not oldest then break end
  if oldest == address then
    position = position + 1
  else
    forget(oldest)
    addresses = addresses - 1
  end
end
-- The share outlives every box of the tenant, and goes with the last of them.
redis.call('SET', total, stored, 'PX', retentionMs)
redis.call('PEXPIRE', boxes, retentionMs)
redis.call('PEXPIRE', bytes, retentionMs)
return 0
`

/* Webhook queues (lib/state/redis/webhook-queue.ts). */

/** The fields of a webhook stream entry: the delivery (JSON) and, in the dead letters, why it is there. */
export const WEBHOOK_ENTRY = { delivery: 'd', reason: 'why' } as const

/** Due retries moved back to the stream per claim. */
const PROMOTE_BATCH = 100

/** Creates the consumer group with the stream, so that nothing queued is read past. */
const WEBHOOK_ENSURE_GROUP_LUA = `
local function ensureGroup (stream, group)
  if redis.call('EXISTS', stream) == 0 then redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM') end
end
`
/**
 * Moves a tenant's longest-waiting deliveries to its dead letters until stream and retries hold
 * at most `cap`: retries first (due last first: they failed most), then the oldest entries no
 * consumer holds (those after the last held one, which every settled entry before it left).
 */
const WEBHOOK_MAKE_ROOM_LUA = `
local function makeRoom (stream, retry, dead, group, cap)
  local over = redis.call('XLEN', stream) + redis.call('ZCARD', retry) - cap
  if over <= 0 then return 0 end
  local moved = 0
  for _, member in ipairs(redis.call('ZRANGE', retry, 0, over - 1, 'REV')) do
    redis.call('ZREM', retry, member)
    redis.call('XADD', dead, 'MAXLEN', cap, '*', '${WEBHOOK_ENTRY.delivery}', member, '${WEBHOOK_ENTRY.reason}', 'overflow')
    moved = moved + 1
  end
  if moved < over then
    local from = '-'
    local pending = redis.pcall('XPENDING', stream, group)
    if type(pending) == 'table' and not pending.err and pending[1] > 0 then from = '(' .. pending[3] end
    for _, entry in ipairs(redis.call('XRANGE', stream, from, '+', 'COUNT', over - moved)) do
      redis.call('XDEL', stream, entry[1])
      redis.call('XADD', dead, 'MAXLEN', cap, '*', '${WEBHOOK_ENTRY.delivery}', entry[2][2], '${WEBHOOK_ENTRY.reason}', 'overflow')
      moved = moved + 1
    end
  end
  return moved
end
`
/** A tenant's stream, retries, dead letters and once key; the group, the once key's lifetime ms (0: none), the cap, then the deliveries. */
export const WEBHOOK_ENQUEUE_ARGS = scriptArgs({ keys: [key('stream'), key('retry'), key('dead'), key('onceKey')], argv: [text('group'), number('onceTtlMs'), number('cap'), texts('deliveries')] })
/** WEBHOOK_ENQUEUE_ARGS. Reply { queued, overflowed }. */
export const WEBHOOK_ENQUEUE_LUA = `${WEBHOOK_ENSURE_GROUP_LUA}${WEBHOOK_MAKE_ROOM_LUA}${luaPrologue(WEBHOOK_ENQUEUE_ARGS)}if onceTtlMs ~= 0 and not redis.call('SET', onceKey, '1', 'PX', onceTtlMs, 'NX') then return { 0, 0 } end
ensureGroup(stream, group)
for i = deliveriesAt, deliveriesAt + deliveriesCount - 1 do redis.call('XADD', stream, '*', '${WEBHOOK_ENTRY.delivery}', ARGV[i]) end
return { 1, makeRoom(stream, retry, dead, group, cap) }
`
/** A tenant's stream, retries and dead letters; the group, the cap, then a due time (ms) and a delivery per retry. */
export const WEBHOOK_REQUEUE_ARGS = scriptArgs({ keys: [key('stream'), key('retry'), key('dead')], argv: [text('group'), number('cap'), tuples('retries', ['dueMs', 'delivery'])] })
/** WEBHOOK_REQUEUE_ARGS. Reply: how many overflowed. */
export const WEBHOOK_REQUEUE_LUA = `${WEBHOOK_ENSURE_GROUP_LUA}${WEBHOOK_MAKE_ROOM_LUA}${luaPrologue(WEBHOOK_REQUEUE_ARGS)}ensureGroup(stream, group)
for i = retriesAt, retriesAt + 2 * retriesCount - 1, 2 do redis.call('ZADD', retry, ARGV[i], ARGV[i + 1]) end
return makeRoom(stream, retry, dead, group, cap)
`
/** A tenant's stream and retries; the group, the consumer, now (ms), how many to claim, how long held means stuck (ms), XAUTOCLAIM's cursor. */
export const WEBHOOK_CLAIM_ARGS = scriptArgs({ keys: [key('stream'), key('retry')], argv: [text('group'), text('consumer'), text('nowMs'), number('max'), text('stuckMs'), text('cursor')] })
/**
 * WEBHOOK_CLAIM_ARGS. Reply { next cursor, stream length, first retry's due ms or '', then
 * { id, { 'd', delivery } } per claimed entry }. A queue left with nothing waiting, held or due
 * later is deleted.
 */
export const WEBHOOK_CLAIM_LUA = `${WEBHOOK_ENSURE_GROUP_LUA}${luaPrologue(WEBHOOK_CLAIM_ARGS)}ensureGroup(stream, group)
local due = redis.call('ZRANGEBYSCORE', retry, '-inf', nowMs, 'LIMIT', 0, ${PROMOTE_BATCH})
for _, member in ipairs(due) do
  redis.call('ZREM', retry, member)
  redis.call('XADD', stream, '*', '${WEBHOOK_ENTRY.delivery}', member)
end
local taken = redis.call('XAUTOCLAIM', stream, group, consumer, stuckMs, cursor, 'COUNT', max)
local reply = { taken[1], 0, '' }
for _, entry in ipairs(taken[2]) do
  if entry[2] then reply[#reply + 1] = entry end
end
if #reply - 3 < max then
  local fresh = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', max - #reply + 3, 'STREAMS', stream, '>')
  if fresh then
    for _, entry in ipairs(fresh[1][2]) do reply[#reply + 1] = entry end
  end
end
reply[2] = redis.call('XLEN', stream)
local first = redis.call('ZRANGE', retry, 0, 0, 'WITHSCORES')
if first[2] then reply[3] = first[2] end
if reply[2] == 0 and not first[2] then redis.call('DEL', stream) end
return reply
`
/**
 * Settling a delivery the consumer holds: the check every settle script starts with, on the
 * `stream`, `group`, `entryId` and `consumer` each one's arguments name first.
 */
const WEBHOOK_HELD_LUA = `local held = redis.call('XPENDING', stream, group, entryId, entryId, 1, consumer)
if #held == 0 then return 0 end
redis.call('XACK', stream, group, entryId)
redis.call('XDEL', stream, entryId)
`
/** A tenant's stream; the group, the entry id, the consumer. */
export const WEBHOOK_COMPLETE_ARGS = scriptArgs({ keys: [key('stream')], argv: [text('group'), text('entryId'), text('consumer')] })
/** WEBHOOK_COMPLETE_ARGS. */
export const WEBHOOK_COMPLETE_LUA = `${luaPrologue(WEBHOOK_COMPLETE_ARGS)}${WEBHOOK_HELD_LUA}return 1
`
/** A tenant's stream and retries; the group, the entry id, the consumer, the delivery, when it is due (ms). */
export const WEBHOOK_RETRY_ARGS = scriptArgs({ keys: [key('stream'), key('retry')], argv: [text('group'), text('entryId'), text('consumer'), text('delivery'), number('dueMs')] })
/** WEBHOOK_RETRY_ARGS. */
export const WEBHOOK_RETRY_LUA = `${luaPrologue(WEBHOOK_RETRY_ARGS)}${WEBHOOK_HELD_LUA}redis.call('ZADD', retry, dueMs, delivery)
return 1
`
/** A tenant's stream and dead letters; the group, the entry id, the consumer, the delivery, the cap. */
export const WEBHOOK_BURY_ARGS = scriptArgs({ keys: [key('stream'), key('dead')], argv: [text('group'), text('entryId'), text('consumer'), text('delivery'), number('cap')] })
/** WEBHOOK_BURY_ARGS. */
export const WEBHOOK_BURY_LUA = `${luaPrologue(WEBHOOK_BURY_ARGS)}${WEBHOOK_HELD_LUA}redis.call('XADD', dead, 'MAXLEN', cap, '*', '${WEBHOOK_ENTRY.delivery}', delivery, '${WEBHOOK_ENTRY.reason}', 'failed')
return 1
`
/** A tenant's dead letters; the cap, then the deliveries given up. */
export const WEBHOOK_ADD_DEAD_ARGS = scriptArgs({ keys: [key('dead')], argv: [number('cap'), texts('deliveries')] })
/** WEBHOOK_ADD_DEAD_ARGS. */
export const WEBHOOK_ADD_DEAD_LUA = `${luaPrologue(WEBHOOK_ADD_DEAD_ARGS)}for i = deliveriesAt, deliveriesAt + deliveriesCount - 1 do redis.call('XADD', dead, 'MAXLEN', cap, '*', '${WEBHOOK_ENTRY.delivery}', ARGV[i], '${WEBHOOK_ENTRY.reason}', 'failed') end
return 1
`
/** A tenant's dead letters, stream and retries; the dead letter's id, the group, the cap, the delivery to queue. */
export const WEBHOOK_REPLAY_ARGS = scriptArgs({ keys: [key('dead'), key('stream'), key('retry')], argv: [text('letterId'), text('group'), number('cap'), text('delivery')] })
/**
 * WEBHOOK_REPLAY_ARGS. Moves it once, however many replay it, and only into a queue below its
 * cap. Reply 1 moved, 0 no such letter, 2 queue full.
 */
export const WEBHOOK_REPLAY_LUA = `${WEBHOOK_ENSURE_GROUP_LUA}${luaPrologue(WEBHOOK_REPLAY_ARGS)}if #redis.call('XRANGE', dead, letterId, letterId) == 0 then return 0 end
if redis.call('XLEN', stream) + redis.call('ZCARD', retry) >= cap then return 2 end
redis.call('XDEL', dead, letterId)
ensureGroup(stream, group)
redis.call('XADD', stream, '*', '${WEBHOOK_ENTRY.delivery}', delivery)
return 1
`
/** The index of tenants with work, its version counter, the index of tenants with dead letters; the tenant, whether work was added, whether dead letters were. */
export const WEBHOOK_INDEX_ARGS = scriptArgs({ keys: [key('index'), key('version'), key('deadIndex')], argv: [text('tenant'), flag('work'), flag('dead')] })
/** WEBHOOK_INDEX_ARGS. */
export const WEBHOOK_INDEX_LUA = `${luaPrologue(WEBHOOK_INDEX_ARGS)}if work then redis.call('ZADD', index, redis.call('INCR', version), tenant) end
if dead then redis.call('SADD', deadIndex, tenant) end
return 1
`
/** The index of tenants with work; the tenant, the version its queue was found empty at. */
export const WEBHOOK_UNINDEX_ARGS = scriptArgs({ keys: [key('index')], argv: [text('tenant'), text('version')] })
/** WEBHOOK_UNINDEX_ARGS. */
export const WEBHOOK_UNINDEX_LUA = `${luaPrologue(WEBHOOK_UNINDEX_ARGS)}if redis.call('ZSCORE', index, tenant) == version then redis.call('ZREM', index, tenant) end
return 1
`
/** The old layout's stream, retries, dead letters and drain lock; the group, the consumer, how long held means stuck (ms), the batch, the lock's lifetime (ms). */
export const WEBHOOK_LEGACY_TAKE_ARGS = scriptArgs({ keys: [key('stream'), key('retry'), key('dead'), key('lock')], argv: [text('group'), text('consumer'), text('stuckMs'), number('batch'), text('lockMs')] })
/**
 * WEBHOOK_LEGACY_TAKE_ARGS. Reply { 0 } nothing left, { 1 } another instance drains, or { 2,
 * stream entries (held by the consumer from now on), retries (member, score…), dead letters }.
 */
export const WEBHOOK_LEGACY_TAKE_LUA = `${luaPrologue(WEBHOOK_LEGACY_TAKE_ARGS)}if redis.call('EXISTS', stream, retry, dead) == 0 then return { 0 } end
local holder = redis.call('GET', lock)
if holder and holder ~= consumer then return { 1 } end
redis.call('SET', lock, consumer, 'PX', lockMs)
local entries = {}
if redis.call('EXISTS', stream) == 1 then
  redis.pcall('XGROUP', 'CREATE', stream, group, '0')
  local taken = redis.call('XAUTOCLAIM', stream, group, consumer, stuckMs, '0-0', 'COUNT', batch)
  for _, entry in ipairs(taken[2]) do
    if entry[2] then entries[#entries + 1] = entry end
  end
  if #entries < batch then
    local fresh = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', batch - #entries, 'STREAMS', stream, '>')
    if fresh then
      for _, entry in ipairs(fresh[1][2]) do entries[#entries + 1] = entry end
    end
  end
  if redis.call('XLEN', stream) == 0 then redis.call('DEL', stream) end
end
return { 2, entries, redis.call('ZRANGE', retry, 0, batch - 1, 'WITHSCORES'), redis.call('XRANGE', dead, '-', '+', 'COUNT', batch) }
`
/**
 * The old layout's stream, retries and dead letters; the group, the consumer, then three lists,
 * each its length first: stream entry ids, retry members, dead letter ids.
 */
export const WEBHOOK_LEGACY_DONE_ARGS = scriptArgs({
  keys: [key('stream'), key('retry'), key('dead')],
  argv: [text('group'), text('consumer'), count('takenIds'), texts('takenIds'), count('retryMembers'), texts('retryMembers'), count('deadIds'), texts('deadIds')]
})
/**
 * WEBHOOK_LEGACY_DONE_ARGS. The stream entries are acknowledged and deleted if the consumer
 * still holds them, the others removed; emptied keys are deleted.
 */
export const WEBHOOK_LEGACY_DONE_LUA = `${luaPrologue(WEBHOOK_LEGACY_DONE_ARGS)}for i = takenIdsAt, takenIdsAt + takenIdsCount - 1 do
  if #redis.call('XPENDING', stream, group, ARGV[i], ARGV[i], 1, consumer) > 0 then
    redis.call('XACK', stream, group, ARGV[i])
    redis.call('XDEL', stream, ARGV[i])
  end
end
for i = retryMembersAt, retryMembersAt + retryMembersCount - 1 do redis.call('ZREM', retry, ARGV[i]) end
for i = deadIdsAt, deadIdsAt + deadIdsCount - 1 do redis.call('XDEL', dead, ARGV[i]) end
if redis.call('EXISTS', stream) == 1 and redis.call('XLEN', stream) == 0 then redis.call('DEL', stream) end
if redis.call('EXISTS', dead) == 1 and redis.call('XLEN', dead) == 0 then redis.call('DEL', dead) end
return 1
`
/** A tenant's stream and retries. */
export const WEBHOOK_BACKLOG_ARGS = scriptArgs({ keys: [key('stream'), key('retry')], argv: [] })
/**
 * A tenant's depth and the earliest `createdAtMs` among its stream (waiting and held) and its
 * retries: one pass over at most WEBHOOK_MAX_QUEUED_PER_TENANT entries, run at scrape time only.
 * The field is read by pattern, not decoded: the body inside is a JSON string whose quotes are
 * escaped, so its own fields never match.
 */
export const WEBHOOK_BACKLOG_LUA = `${luaPrologue(WEBHOOK_BACKLOG_ARGS)}local oldest = nil
local function consider (text)
  local at = tonumber(string.match(text, '"createdAtMs":(%d+)'))
  if at ~= nil and (oldest == nil or at < oldest) then oldest = at end
end
local depth = 0
if redis.call('EXISTS', stream) == 1 then
  for _, entry in ipairs(redis.call('XRANGE', stream, '-', '+')) do
    local fields = entry[2]
    for i = 1, #fields, 2 do if fields[i] == '${WEBHOOK_ENTRY.delivery}' then consider(fields[i + 1]) end end
    depth = depth + 1
  end
end
for _, member in ipairs(redis.call('ZRANGE', retry, 0, -1)) do
  consider(member)
  depth = depth + 1
end
if oldest == nil then return { depth, false } end
return { depth, tostring(oldest) }
`

/* Verification stories (lib/state/redis/verification-log.ts). */

/*
 * A story is a hash: `listed` (events listed so far), `e1`…`e<listed>` (each event's JSON),
 * `n:<type>` (events of each type, listed or not): an event is listed while its type's count is
 * within LISTED_PER_TYPE; and for the funnel `t0`, when it was requested (ms), and `ts`, when
 * its mail was sent. The scope's two indexes, one per lane, are sorted sets of story keys by when
 * they were requested, on Redis's clock.
 */

/**
 * Counting in the funnel's buckets (lib/state/insights.ts), for the verification log's script:
 * `countIn(requestedMs, fields)` adds one to each field in the hour's and the day's bucket of
 * the story's request time, named from the `insights` prefix, each kept `insightsRetentionMs`
 * past its end; `durationField(histogram, ms)` names a duration's bin, as durationField does.
 */
const INSIGHTS_BUCKET_LUA = `
local durationBounds = { ${DURATION_BOUNDS_SECONDS.join(', ')} }
local function durationField (histogram, ms)
  local seconds = math.max(0, ms) / 1000
  for _, upper in ipairs(durationBounds) do
    if seconds <= upper then return histogram .. ':' .. upper end
  end
  return histogram .. ':inf'
end
local bucketSizes = { { 'h', ${BUCKET_MS.hour} }, { 'd', ${BUCKET_MS.day} } }
-- The call's counts, summed per bucket and field and written once at its end (writeCounts): a
-- call carries the events of many requests, nearly all in the same hour and day.
local counted, expiring, countedBuckets = {}, {}, {}
local function countIn (requestedMs, fields)
  for _, size in ipairs(bucketSizes) do
    local number = math.floor(requestedMs / size[2])
    local expireAt = (number + 1) * size[2] + insightsRetentionMs
    if expireAt > nowMs then
      local bucket = insights .. size[1] .. ':' .. string.format('%d', number)
      local counts = counted[bucket]
      if counts == nil then
        counts = {}
        counted[bucket] = counts
        expiring[bucket] = expireAt
        countedBuckets[#countedBuckets + 1] = bucket
      end
      for _, field in ipairs(fields) do counts[field] = (counts[field] or 0) + 1 end
    end
  end
end
local function writeCounts ()
  for _, bucket in ipairs(countedBuckets) do
    for field, count in pairs(counted[bucket]) do redis.call('HINCRBY', bucket, field, count) end
    redis.call('PEXPIREAT', bucket, string.format('%d', expiring[bucket]))
  end
end
`

/**
 * The lane indexes, the insights prefix, each event's story key; retention, each lane's cap, the
 * insights' retention; each event's type, its story's lane (a `requested` one's), JSON, time (ms)
 * and the field the funnel counts it by (a failure's reason, a bounce's type; else empty).
 */
export const VERIFICATION_LOG_ARGS = scriptArgs({
  keys: [key('index'), key('browserIndex'), key('insights'), keys('stories')],
  argv: [number('retentionMs'), number('maxStories'), number('maxBrowserStories'), number('insightsRetentionMs'), tuples('events', ['type', 'lane', 'json', 'atMs', 'detail'], 'stories')]
})
/**
 * VERIFICATION_LOG_ARGS. A `requested` event starts its story (once: a repeat is dropped) and
 * forgets its lane's oldest stories past the lane's cap; any other event is added to a story that
 * exists and dropped otherwise. Each event a story takes is counted in the funnel's buckets of
 * the story's request time, each type the first time the story has one (countIn; a wrong guess
 * only before a right one: eventFields says why); a story written before it kept `t0` is not counted. Reply: the events written.
 */
export const VERIFICATION_LOG_LUA = `${WRITES_SHEBANG}${luaPrologue(VERIFICATION_LOG_ARGS)}
local listedPerType = { ${Object.entries(LISTED_PER_TYPE).map(([type, listed]) => `${type} = ${listed}`).join(', ')} }
local onceCounted = { ${ONCE_COUNTED.map((type) => `${type} = true`).join(', ')} }
local countedBy = { ${Object.keys(COUNTED_BY).map((type) => `${type} = true`).join(', ')} }
local time = redis.call('TIME')
local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
${INSIGHTS_BUCKET_LUA}
redis.call('ZREMRANGEBYSCORE', index, '-inf', nowMs - retentionMs)
redis.call('ZREMRANGEBYSCORE', browserIndex, '-inf', nowMs - retentionMs)
-- Each story the call touches is read once and written once, at the end (one HSET of every field
-- its events changed): a dispatch's requested and sent events, nearly always in one call, cost
-- one write, not one per event and field. Each lane's index is added to once per call too.
local lanes = {
  backend = { index = index, cap = maxStories, members = {}, last = nil },
  browser = { index = browserIndex, cap = maxBrowserStories, members = {}, last = nil }
}
local touched, touchedOrder = {}, {}
local function touch (story, state)
  touched[story] = state
  touchedOrder[#touchedOrder + 1] = story
  return state
end
-- An existing story's state, or nil when there is none.
local function existing (story)
  local state = touched[story]
  if state ~= nil then return state end
  local f = redis.call('HMGET', story, 'listed', 't0', 'ts', 'n:verified')
  if not f[1] then return nil end
  return touch(story, { listed = tonumber(f[1]), t0 = tonumber(f[2] or ''), ts = tonumber(f[3] or ''), counts = { verified = tonumber(f[4] or '0') }, fresh = false, set = {} })
end
local function countOf (story, state, eventType)
  local count = state.counts[eventType]
  if count == nil then
    count = state.fresh and 0 or tonumber(redis.call('HGET', story, 'n:' .. eventType) or '0')
    state.counts[eventType] = count
  end
  return count
end
local written = 0
for i = 0, storiesCount - 1 do
  local story = KEYS[storiesAt + i]
  local at = eventsAt + 5 * i
  local eventType = ARGV[at]
  local json = ARGV[at + 2]
  local atMs = tonumber(ARGV[at + 3])
  if eventType == 'requested' then
    if touched[story] == nil and redis.call('EXISTS', story) == 0 then
      local state = touch(story, { listed = 1, t0 = atMs, ts = nil, counts = { requested = 1 }, fresh = true,
        set = { listed = 1, e1 = json, ['n:requested'] = 1, t0 = ARGV[at + 3] } })
      local lane = lanes[ARGV[at + 1]] or lanes.backend
      -- Past the cap the lowest score goes first: stories started in one millisecond (one call
      -- holds many) must not tie, or Redis would order them by name, not by when they started.
      if lane.last == nil then lane.last = tonumber(redis.call('ZRANGE', lane.index, -1, -1, 'WITHSCORES')[2] or '-1') end
      local score = nowMs
      if lane.last >= score then score = lane.last + 1 / 1024 end
      lane.last = score
      lane.members[#lane.members + 1] = string.format('%.17g', score)
      lane.members[#lane.members + 1] = story
      countIn(atMs, { 'requested' })
      written = written + 1
    end
  else
    local state = existing(story)
    if state ~= nil then
      local count = countOf(story, state, eventType) + 1
      state.counts[eventType] = count
      state.set['n:' .. eventType] = count
      if count <= (listedPerType[eventType] or 0) then
        state.listed = state.listed + 1
        state.set.listed = state.listed
        state.set['e' .. state.listed] = json
      end
      if state.t0 ~= nil then
        local fields = {}
        if eventType == 'wrong_guess' then
          if count == 1 and countOf(story, state, 'verified') == 0 then fields = { 'wrong_guess' } end
        elseif count == 1 and countedBy[eventType] then
          fields = { eventType .. ':' .. ARGV[at + 4] }
        elseif count == 1 and onceCounted[eventType] then
          fields = { eventType }
          if eventType == 'sent' then
            state.ts = atMs
            state.set.ts = ARGV[at + 3]
          elseif (eventType == 'verified' or eventType == 'delivered') and state.ts ~= nil then
            fields[2] = durationField(eventType == 'verified' and 'ttv' or 'ttd', atMs - state.ts)
          end
        end
        if #fields > 0 then countIn(state.t0, fields) end
      end
      written = written + 1
    end
  end
end
for _, story in ipairs(touchedOrder) do
  local state = touched[story]
  local args = {}
  for field, value in pairs(state.set) do
    args[#args + 1] = field
    args[#args + 1] = value
  end
  if #args > 0 then redis.call('HSET', story, unpack(args)) end
  if state.fresh then redis.call('PEXPIRE', story, retentionMs) end
end
for _, lane in pairs(lanes) do
  if #lane.members > 0 then
    redis.call('ZADD', lane.index, unpack(lane.members))
    local over = redis.call('ZCARD', lane.index) - lane.cap
    if over > 0 then
      for _, gone in ipairs(redis.call('ZRANGE', lane.index, 0, over - 1)) do redis.call('DEL', gone) end
      redis.call('ZREMRANGEBYRANK', lane.index, 0, over - 1)
    end
    redis.call('PEXPIRE', lane.index, retentionMs)
  end
end
writeCounts()
return written
`
