/*
 * The scripts' arguments are named once (lib/state/redis/script-args.ts): the
 * arrays packed from the names are the ones deployed instances send (the wire format predates
 * the names), and the Lua locals the scripts read name the same positions, on a real
 * redis-server.
 */
import t from 'tap'
import { luaPrologue, packArgs, type ArgValues } from '../../../../lib/state/redis/script-args.js'
import {
  COUNT_ARGS, DISPATCH_ARGS, IDEMPOTENCY_ABANDON_ARGS, IDEMPOTENCY_BEGIN_ARGS, IDEMPOTENCY_COMPLETE_ARGS, IDEMPOTENCY_SENDING_ARGS, MAILBOX_ARGS, RECEIPT_EPOCH_ARGS, RECEIPT_REDEEM_ARGS, RESTORE_TOKEN_ARGS, SANDBOX_ADD_ARGS, UNDO_DISPATCH_ARGS, VERIFY_ARGS,
  WEBHOOK_ADD_DEAD_ARGS, WEBHOOK_BACKLOG_ARGS, WEBHOOK_BURY_ARGS, WEBHOOK_CLAIM_ARGS, WEBHOOK_COMPLETE_ARGS, WEBHOOK_ENQUEUE_ARGS, WEBHOOK_INDEX_ARGS, WEBHOOK_LEGACY_DONE_ARGS, WEBHOOK_LEGACY_TAKE_ARGS, WEBHOOK_REPLAY_ARGS, WEBHOOK_REQUEUE_ARGS, WEBHOOK_RETRY_ARGS, WEBHOOK_UNINDEX_ARGS
} from '../../../../lib/state/redis/scripts.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../../support/redis.js'

const own = { max: 5, windowMs: 60_000 }
const shared = { max: 30, windowMs: 3_600_000 }

const dispatch = packArgs(DISPATCH_ARGS, {
  tokenKey: 'otp:{acme:live}:r1',
  lockoutKey: 'lockout:{acme:live}:tag',
  quotas: ['quota:{acme:live}:w', 'quota:{acme:live}:k:share:w'],
  mailbox: ['rl:m:{mailbox:live:tag}'],
  reserve: ['rl:mc:{acme:live}:tag'],
  limits: ['rl:s:{acme:live}:src', 'rl:r:{acme:live}:tag'],
  suppressionKey: 'suppressed:{acme:live}:tag',
  record: 'k1.mac|tag|hash',
  ttlMs: 600_000,
  ownLimits: 1,
  withhold: true,
  quotaArgs: [{ limit: 1000, expireAtMs: 1_800_000_000_000 }, { limit: 100, expireAtMs: 1_800_000_000_001 }],
  mailboxArgs: [{ max: 20, windowMs: 86_400_000 }],
  reserveArgs: [{ max: 2, windowMs: 86_400_000 }],
  limitArgs: [own, shared]
})

const verify = packArgs(VERIFY_ARGS, {
  tokenKey: 'otp:{acme:live}:r1',
  limits: ['rl:s:{acme:live}:src', 'rl:r:{acme:live}:tag'],
  lockoutPrefix: 'lockout:{acme:live}:',
  threshold: 10,
  baseMs: 900_000,
  maxMs: 2_592_000_000,
  resetAfterMs: 86_400_000,
  ownLimits: 1,
  forms: ['k1.a', 'k2.b'],
  limitArgs: [own, shared],
  attempt: 'p1'
})

t.test('the packed arrays are the wire format deployed instances send', async (t) => {
  // The dispatch script with the tenant's reserve is a script of its own (another SHA): instances
  // that predate it go on sending the arrays of theirs, which it never reads.
  t.same(dispatch, {
    keys: ['otp:{acme:live}:r1', 'lockout:{acme:live}:tag', 'quota:{acme:live}:w', 'quota:{acme:live}:k:share:w', 'rl:m:{mailbox:live:tag}', 'rl:mc:{acme:live}:tag', 'rl:s:{acme:live}:src', 'rl:r:{acme:live}:tag', 'suppressed:{acme:live}:tag'],
    args: ['k1.mac|tag|hash', '600000', '2', '1', '1', '1', '1', '1000', '1800000000000', '100', '1800000000001', '20', '86400000', '2', '86400000', '5', '60000', '30', '3600000']
  }, 'dispatch: token, lockout, quotas, mailbox, reserve, limits, suppression; record, TTL, the four counts, withhold, then the pairs')
  t.same(verify, {
    keys: ['otp:{acme:live}:r1', 'rl:s:{acme:live}:src', 'rl:r:{acme:live}:tag'],
    args: ['lockout:{acme:live}:', '10', '900000', '2592000000', '86400000', '2', '1', 'k1.a', 'k2.b', '5', '60000', '30', '3600000', 'p1']
  }, 'verify: the lockout prefix and policy, the counts, the forms, the pairs, the attempt')
  t.same(packArgs(COUNT_ARGS, { limits: ['a', 'b'], limitArgs: [own, shared] }), { keys: ['a', 'b'], args: ['5', '60000', '30', '3600000'] })
  t.same(packArgs(MAILBOX_ARGS, { bucketKey: 'm', max: 20, windowMs: 1000 }), { keys: ['m'], args: ['20', '1000'] })
  t.same(packArgs(UNDO_DISPATCH_ARGS, { tokenKey: 'otp', counters: ['q1', 'q2', 'mc'] }), { keys: ['otp', 'q1', 'q2', 'mc'], args: [] }, 'undo: the quota counters and the tenant\'s mailbox count, one list as before')
  t.same(packArgs(RESTORE_TOKEN_ARGS, { tokenKey: 'otp', attempt: 'p1' }), { keys: ['otp'], args: ['p1'] })
  t.same(packArgs(IDEMPOTENCY_BEGIN_ARGS, { record: 'r', lock: 'l', fingerprint: 'f', attempt: 'a', ttlMs: 86_400_000, lockMs: 30_000 }), { keys: ['r', 'l'], args: ['f', 'a', '86400000', '30000'] })
  t.same(packArgs(IDEMPOTENCY_SENDING_ARGS, { record: 'r', attempt: 'a' }), { keys: ['r'], args: ['a'] })
  t.same(packArgs(IDEMPOTENCY_COMPLETE_ARGS, { record: 'r', lock: 'l', fingerprint: 'f', attempt: 'a', response: '{}', ttlMs: 1000 }), { keys: ['r', 'l'], args: ['f', 'a', '{}', '1000'] })
  t.same(packArgs(IDEMPOTENCY_ABANDON_ARGS, { record: 'r', lock: 'l', attempt: 'a' }), { keys: ['r', 'l'], args: ['a'] })
  t.same(packArgs(RECEIPT_EPOCH_ARGS, { epochKey: 'e', newEpoch: 'n' }), { keys: ['e'], args: ['n'] })
  t.same(packArgs(SANDBOX_ADD_ARGS, {
    box: 'b', boxes: 'bs', bytes: 'by', total: 't', pieces: ['p1', 'p2'], entry: 'e', address: 'a', boxPrefix: 'x', perAddress: 20, retentionMs: 3_600_000, maxAddresses: 1000, maxBytes: 33_554_432, pieceValues: [{ value: 'v1' }, { value: '' }]
  }), { keys: ['b', 'bs', 'by', 't', 'p1', 'p2'], args: ['e', 'a', 'x', '20', '3600000', '1000', '33554432', 'v1', ''] }, 'sandbox add: the box, the share, the pieces; the entry, its bounds, each piece\'s value')
  t.same(packArgs(RECEIPT_REDEEM_ARGS, { epochKey: 'e', redemptionKey: 'r', epoch: 'x', ttlMs: 300_000, newEpoch: 'n' }), { keys: ['e', 'r'], args: ['x', '300000', 'n'] })
})

const queue = { stream: 's', retry: 'r', dead: 'x' }
const enqueue = packArgs(WEBHOOK_ENQUEUE_ARGS, { ...queue, onceKey: 'o', group: 'workers', onceTtlMs: 60_000, cap: 10_000, deliveries: ['{"a":1}', '{"b":2}'] })
const requeue = packArgs(WEBHOOK_REQUEUE_ARGS, { ...queue, group: 'workers', cap: 100, retries: [{ dueMs: '1700000000000', delivery: 'd1' }, { dueMs: '1700000000001', delivery: 'd2' }] })
const legacyDone = packArgs(WEBHOOK_LEGACY_DONE_ARGS, { ...queue, group: 'workers', consumer: 'c', takenIds: ['1-0', '2-0'], retryMembers: [], deadIds: ['3-0'] })

t.test('the webhook queue\'s arrays are the ones its hand-packed calls sent', async (t) => {
  t.same(enqueue, { keys: ['s', 'r', 'x', 'o'], args: ['workers', '60000', '10000', '{"a":1}', '{"b":2}'] }, 'enqueue: group, once TTL, cap, then the deliveries')
  t.same(requeue, { keys: ['s', 'r', 'x'], args: ['workers', '100', '1700000000000', 'd1', '1700000000001', 'd2'] }, 'requeue: group, cap, then due and delivery pairs')
  t.same(packArgs(WEBHOOK_CLAIM_ARGS, { stream: 's', retry: 'r', group: 'workers', consumer: 'c', nowMs: '1700000000000', max: 8, stuckMs: '60000', cursor: '0-0' }), { keys: ['s', 'r'], args: ['workers', 'c', '1700000000000', '8', '60000', '0-0'] })
  t.same(packArgs(WEBHOOK_COMPLETE_ARGS, { stream: 's', group: 'workers', entryId: '1-0', consumer: 'c' }), { keys: ['s'], args: ['workers', '1-0', 'c'] })
  t.same(packArgs(WEBHOOK_RETRY_ARGS, { stream: 's', retry: 'r', group: 'workers', entryId: '1-0', consumer: 'c', delivery: 'd', dueMs: 1_700_000_000_000 }), { keys: ['s', 'r'], args: ['workers', '1-0', 'c', 'd', '1700000000000'] })
  t.same(packArgs(WEBHOOK_BURY_ARGS, { stream: 's', dead: 'x', group: 'workers', entryId: '1-0', consumer: 'c', delivery: 'd', cap: 10_000 }), { keys: ['s', 'x'], args: ['workers', '1-0', 'c', 'd', '10000'] })
  t.same(packArgs(WEBHOOK_ADD_DEAD_ARGS, { dead: 'x', cap: 10_000, deliveries: ['d1', 'd2'] }), { keys: ['x'], args: ['10000', 'd1', 'd2'] })
  t.same(packArgs(WEBHOOK_REPLAY_ARGS, { ...queue, letterId: '1-0', group: 'workers', cap: 10_000, delivery: 'd' }), { keys: ['x', 's', 'r'], args: ['1-0', 'workers', '10000', 'd'] })
  t.same(packArgs(WEBHOOK_INDEX_ARGS, { index: 'i', version: 'v', deadIndex: 'di', tenant: 'acme', work: true, dead: false }), { keys: ['i', 'v', 'di'], args: ['acme', '1', '0'] })
  t.same(packArgs(WEBHOOK_UNINDEX_ARGS, { index: 'i', tenant: 'acme', version: '7' }), { keys: ['i'], args: ['acme', '7'] })
  t.same(packArgs(WEBHOOK_LEGACY_TAKE_ARGS, { ...queue, lock: 'l', group: 'workers', consumer: 'c', stuckMs: '60000', batch: 500, lockMs: '30000' }), { keys: ['s', 'r', 'x', 'l'], args: ['workers', 'c', '60000', '500', '30000'] })
  t.same(legacyDone, { keys: ['s', 'r', 'x'], args: ['workers', 'c', '2', '1-0', '2-0', '0', '1', '3-0'] }, 'legacy done: each list after its length')
  t.same(packArgs(WEBHOOK_BACKLOG_ARGS, { stream: 's', retry: 'r' }), { keys: ['s', 'r'], args: [] })
})

t.test('a list of tuples must have an entry per entry of its list', async (t) => {
  t.throws(() => packArgs(COUNT_ARGS, { limits: ['a', 'b'], limitArgs: [own] }), /limitArgs: 1 entries for 2 limits/)
})

t.test('the prologue reads back what was packed, on Redis', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  const client = await connectFailFast(server.url)
  t.teardown(() => { client.disconnect() })
  // The fence's deadline, last of every fenced call's arguments.
  const deadline = '99999999999999'

  const readDispatch = `${luaPrologue(DISPATCH_ARGS)}return { tokenKey, lockoutKey, KEYS[quotasAt], quotasCount, KEYS[mailboxAt], mailboxCount, KEYS[reserveAt], reserveCount, KEYS[limitsAt], limitsCount, suppressionKey, record, ttlMs, ownLimits, tostring(withhold), ARGV[quotaArgsAt + 2], ARGV[mailboxArgsAt + 1], ARGV[reserveArgsAt], ARGV[limitArgsAt + 2 * limitsCount - 1] }`
  t.same(await client.eval(readDispatch, dispatch.keys.length, ...dispatch.keys, ...dispatch.args, deadline), [
    'otp:{acme:live}:r1', 'lockout:{acme:live}:tag', 'quota:{acme:live}:w', 2, 'rl:m:{mailbox:live:tag}', 1, 'rl:mc:{acme:live}:tag', 1, 'rl:s:{acme:live}:src', 2,
    'suppressed:{acme:live}:tag', 'k1.mac|tag|hash', 600000, 1, 'true', '100', '86400000', '2', '3600000'
  ], 'dispatch: every key, count and argument where the script reads it')

  const readVerify = `${luaPrologue(VERIFY_ARGS)}return { tokenKey, KEYS[limitsAt], limitsCount, lockoutPrefix, threshold, baseMs, maxMs, resetAfterMs, ownLimits, ARGV[formsAt], formsCount, ARGV[limitArgsAt + 1], attempt }`
  t.same(await client.eval(readVerify, verify.keys.length, ...verify.keys, ...verify.args, deadline), [
    'otp:{acme:live}:r1', 'rl:s:{acme:live}:src', 2, 'lockout:{acme:live}:', 10, 900000, 2592000000, 86400000, 1, 'k1.a', 2, '60000', 'p1'
  ], 'verify: the attempt found after the variable lists')

  const readEnqueue = `${luaPrologue(WEBHOOK_ENQUEUE_ARGS)}return { stream, onceKey, group, onceTtlMs, cap, ARGV[deliveriesAt], deliveriesCount }`
  t.same(await client.eval(readEnqueue, enqueue.keys.length, ...enqueue.keys, ...enqueue.args), ['s', 'o', 'workers', 60000, 10000, '{"a":1}', 2], 'enqueue: the deliveries are the rest of ARGV')
  const readRequeue = `${luaPrologue(WEBHOOK_REQUEUE_ARGS)}return { cap, retriesCount, ARGV[retriesAt], ARGV[retriesAt + 2 * retriesCount - 1] }`
  t.same(await client.eval(readRequeue, requeue.keys.length, ...requeue.keys, ...requeue.args), [100, 2, '1700000000000', 'd2'], 'requeue: pairs to the end of ARGV')
  const readLegacyDone = `${luaPrologue(WEBHOOK_LEGACY_DONE_ARGS)}return { consumer, takenIdsCount, ARGV[takenIdsAt + 1], retryMembersCount, deadIdsCount, ARGV[deadIdsAt] }`
  t.same(await client.eval(readLegacyDone, legacyDone.keys.length, ...legacyDone.keys, ...legacyDone.args), ['c', 2, '2-0', 0, 1, '3-0'], 'legacy done: each list found after the one before')

  const noMailbox = packArgs(DISPATCH_ARGS, { ...dispatchValues(), mailbox: [], mailboxArgs: [] })
  t.same(await client.eval(`${luaPrologue(DISPATCH_ARGS)}return { mailboxCount, KEYS[reserveAt], ARGV[reserveArgsAt + 1], KEYS[limitsAt], limitsCount, suppressionKey, ARGV[limitArgsAt] }`, noMailbox.keys.length, ...noMailbox.keys, ...noMailbox.args, deadline),
    [0, 'rl:mc:{acme:live}:tag', '1', 'rl:s:{acme:live}:src', 2, 'suppressed:{acme:live}:tag', '5'], 'dispatch without the mailbox bucket (a Cluster counts it apart), with the tenant\'s count')
  const capOff = packArgs(DISPATCH_ARGS, { ...dispatchValues(), mailbox: [], mailboxArgs: [], reserve: [], reserveArgs: [] })
  t.same(await client.eval(`${luaPrologue(DISPATCH_ARGS)}return { mailboxCount, reserveCount, KEYS[limitsAt], limitsCount, suppressionKey, ARGV[limitArgsAt] }`, capOff.keys.length, ...capOff.keys, ...capOff.args, deadline),
    [0, 0, 'rl:s:{acme:live}:src', 2, 'suppressed:{acme:live}:tag', '5'], 'dispatch with the cap off: neither')
})

function dispatchValues (): ArgValues<typeof DISPATCH_ARGS> {
  return {
    tokenKey: 'otp:{acme:live}:r1',
    lockoutKey: 'lockout:{acme:live}:tag',
    quotas: ['quota:{acme:live}:w'],
    mailbox: ['rl:m:{mailbox:live:tag}'],
    reserve: ['rl:mc:{acme:live}:tag'],
    limits: ['rl:s:{acme:live}:src', 'rl:r:{acme:live}:tag'],
    suppressionKey: 'suppressed:{acme:live}:tag',
    record: 'k1.mac|tag',
    ttlMs: 600_000,
    ownLimits: 1,
    withhold: false,
    quotaArgs: [{ limit: 1000, expireAtMs: 1 }],
    mailboxArgs: [{ max: 20, windowMs: 1 }],
    reserveArgs: [{ max: 2, windowMs: 1 }],
    limitArgs: [own, shared]
  }
}
