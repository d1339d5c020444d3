import { Cluster } from 'ioredis'
import type { RedisClient } from './client.js'
import { TAG_KEY_FINGERPRINT, TAG_KEY_FINGERPRINT_COPIES } from './keys.js'
import { NodeReplies } from './readiness-reads.js'

/** The running recipient tag key's fingerprint, and the one an operator accepted in place of the stored one. */
export interface TagKeyCheck {
  fingerprint: string
  /** RECIPIENT_TAG_KEY_ACCEPT: adopt this fingerprint over the one stored (null: never). */
  accept: string | null
}

/** What the stored fingerprints say of the running key. */
export type TagKeyStanding =
  /** Every copy that answered holds the running key's (or now does); the others are compared when they answer. */
  | { kind: 'matched' }
  /** Nothing known yet: no copy answered (or none may be recorded yet). No refusal: compared again on the next check. */
  | { kind: 'unread' }
  | { kind: 'differs', stored: string }

/** Where a difference found after start-up and an accepted key are reported: pino's logger. */
export interface TagKeyLog {
  error (fields: object, message: string): void
  info (fields: object, message: string): void
}

/** How long a copy found to match stands before it is compared again (one EVAL a copy, on readiness checks). */
export const RECHECK_MS = 5000

/** One copy's answer: `missing` only when the script was asked not to record. */
type CopyReply = { kind: 'same' | 'recorded' | 'accepted' | 'missing' } | { kind: 'differs', stored: string }

/*
 * One copy of the fingerprint, in one step: recorded when missing (if ARGV[3] asks for it),
 * compared otherwise, replaced only when RECIPIENT_TAG_KEY_ACCEPT names the running key's
 * fingerprint. A copy, once recorded, changes only by that acceptance: two instances with
 * different keys can never both find every copy they read to be theirs.
 */
const CHECK = `#!lua
local stored = redis.call('GET', KEYS[1])
if not stored then
  if ARGV[3] ~= 'record' then return {'missing', ''} end
  redis.call('SET', KEYS[1], ARGV[1])
  return {'recorded', ARGV[1]}
end
if stored == ARGV[1] then return {'same', stored} end
if ARGV[2] == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
  return {'accepted', stored}
end
return {'differs', stored}`

function copyReply (reply: unknown): CopyReply {
  const [kind, stored] = Array.isArray(reply) ? reply as [string, string] : []
  switch (kind) {
    case 'same': case 'recorded': case 'accepted': case 'missing': return { kind }
    case 'differs': return { kind, stored: stored ?? '' }
    default: throw new Error(`unexpected reply from the tag key fingerprint script: ${JSON.stringify(reply)}`)
  }
}

/** The refusal of a running key whose fingerprint is not `stored`, for the start-up line and readiness. */
export function tagKeyRefusal (stored: string, fingerprint: string): { variable: string, problem: string } {
  return {
    variable: 'RECIPIENT_TAG_KEY',
    problem: `is not the key this Redis's suppressions, lockouts and recipient counts were written under (fingerprint ${stored}; this key's is ${fingerprint}): with it every suppression would lift and every count restart. Set the key they were written under (unset, the secret of the only OTP_HMAC_KEYS key is used), or to start them afresh deliberately set RECIPIENT_TAG_KEY_ACCEPT=${fingerprint} once`
  }
}

/**
 * Holds the running recipient tag key to the one Redis's data was written under, through the
 * fingerprint Redis keeps without expiry: TAG_KEY_FINGERPRINT on one server (the same key and
 * behaviour as ever), and on a Cluster that key and TAG_KEY_FINGERPRINT_COPIES, so that a
 * primary down at an instance's start hides some copies and not the verdict.
 *
 * - A copy that differs refuses the key, whenever it is found: at start-up the instance does
 *   not start; later (a primary that was silent at start answers with another key's, or
 *   another instance accepted a new key) it turns not ready, logged with the refusal. Copies
 *   that matched are compared again every RECHECK_MS.
 * - Every copy that answers holds the running key's: matched. Copies found missing are recorded;
 *   the silent ones are compared, and recorded if missing, on the checks after they answer.
 * - No copy holds a fingerprint yet (a new Redis): the legacy key is recorded on its own, then
 *   the others. Two instances starting together with different keys race for that one key and
 *   one of them finds the other's. Until the legacy key answers, nothing is recorded: a first
 *   copy chosen among those that answered would depend on which primaries each instance heard
 *   from in time, and two instances that heard from different ones each recorded its own (on a
 *   loaded machine: neither then ready, the copies split between the two keys); and the data
 *   may have been written by a release that kept the legacy key alone.
 *
 * Copies are read side by side, each waited for READINESS_READ_MS at most.
 */
export class TagKeyGuard {
  readonly #client: RedisClient
  readonly #check: TagKeyCheck
  readonly #log: TagKeyLog
  readonly #copies: readonly string[]
  /**
   * Copies found to hold the running key's fingerprint, and when: compared again once that is
   * RECHECK_MS old, so that an instance still running the old key finds, within a readiness
   * check or two, that another instance replaced it (RECIPIENT_TAG_KEY_ACCEPT), and leaves
   * service instead of lifting the new key's suppressions and splitting its counts.
   */
  readonly #agreed = new Map<string, number>()
  readonly #recheckMs: number
  readonly #replies = new NodeReplies<CopyReply>()
  #matched = false
  #acceptLogged = false
  /** The stored fingerprint last logged as differing, so that one difference is logged once. */
  #differsLogged: string | null = null
  #pending: Promise<TagKeyStanding> | null = null

  constructor (client: RedisClient, check: TagKeyCheck, log: TagKeyLog, options: { recheckMs?: number } = {}) {
    this.#client = client
    this.#recheckMs = options.recheckMs ?? RECHECK_MS
    this.#check = check
    this.#log = log
    this.#copies = client instanceof Cluster ? [TAG_KEY_FINGERPRINT, ...TAG_KEY_FINGERPRINT_COPIES] : [TAG_KEY_FINGERPRINT]
  }

  /** Compares the copies not known to match yet; checks that arrive together share one comparison. */
  async check (): Promise<TagKeyStanding> {
    this.#pending ??= this.#compare().finally(() => { this.#pending = null })
    return await this.#pending
  }

  async #compare (): Promise<TagKeyStanding> {
    const standing = await this.#standing()
    if (standing.kind === 'differs' && standing.stored !== this.#differsLogged) {
      const { variable, problem } = tagKeyRefusal(standing.stored, this.#check.fingerprint)
      this.#log.error({ setting: variable }, `${variable} ${problem}`)
    }
    this.#differsLogged = standing.kind === 'differs' ? standing.stored : null
    return standing
  }

  async #standing (): Promise<TagKeyStanding> {
    const now = Date.now()
    const open = this.#copies.filter((key) => now - (this.#agreed.get(key) ?? -Infinity) >= this.#recheckMs)
    if (open.length === 0) return { kind: 'matched' }
    if (this.#matched) return differing(await this.#ask(open, true)) ?? { kind: 'matched' }

    const read = await this.#ask(open, false)
    const differs = differing(read)
    if (differs !== null) return differs
    const missing = open.filter((key) => read.get(key)?.kind === 'missing')
    if (this.#agreed.size === 0) {
      const [leader] = this.#copies
      if (leader === undefined || read.get(leader)?.kind !== 'missing') return { kind: 'unread' }
      const led = await this.#ask([leader], true)
      if (!this.#agreed.has(leader)) return differing(led) ?? { kind: 'unread' }
    }
    const recorded = await this.#ask(missing.filter((key) => !this.#agreed.has(key)), true)
    const late = differing(recorded)
    if (late !== null) return late
    this.#matched = true
    return { kind: 'matched' }
  }

  /** Each copy's answer in time (copies left out did not answer); the ones that hold the running key's are noted. */
  async #ask (keys: readonly string[], record: boolean): Promise<Map<string, CopyReply>> {
    const { fingerprint, accept } = this.#check
    const replies = new Map<string, CopyReply>()
    await Promise.all(keys.map(async (key) => {
      const outcome = await this.#replies.read(`${record ? 'record' : 'compare'} ${key}`, async () =>
        copyReply(await this.#client.eval(CHECK, 1, key, fingerprint, accept ?? '', record ? 'record' : 'compare')))
      if (outcome?.ok !== true) return
      const reply = outcome.value
      replies.set(key, reply)
      if (reply.kind === 'same' || reply.kind === 'recorded' || reply.kind === 'accepted') this.#agreed.set(key, Date.now())
      if (reply.kind === 'accepted' && !this.#acceptLogged) {
        this.#acceptLogged = true
        this.#log.info({ fingerprint }, 'RECIPIENT_TAG_KEY_ACCEPT: the recipient tag key was replaced; suppressions, lockouts and recipient counts start afresh')
      }
    }))
    return replies
  }
}

function differing (replies: ReadonlyMap<string, CopyReply>): TagKeyStanding | null {
  for (const reply of replies.values()) if (reply.kind === 'differs') return reply
  return null
}
