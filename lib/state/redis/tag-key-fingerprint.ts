import type { RedisClient } from './client.js'
import { TAG_KEY_FINGERPRINT } from './keys.js'
import { storeCall } from '../../store-errors.js'

/** The running recipient tag key's fingerprint, and the one an operator accepted in place of the stored one. */
export interface TagKeyCheck {
  fingerprint: string
  /** RECIPIENT_TAG_KEY_ACCEPT: adopt this fingerprint over the one stored (null: never). */
  accept: string | null
}

/** What the stored fingerprint says of the running key. */
export type TagKeyVerdict =
  | { kind: 'same' | 'recorded' | 'accepted' }
  | { kind: 'differs', stored: string }

/*
 * Recorded on first use, compared thereafter, replaced only when RECIPIENT_TAG_KEY_ACCEPT names
 * the running key's fingerprint: one script, so two instances starting with different keys on
 * an empty Redis cannot both record theirs.
 */
const CHECK = `#!lua
local stored = redis.call('GET', KEYS[1])
if not stored then
  redis.call('SET', KEYS[1], ARGV[1])
  return {'recorded', ARGV[1]}
end
if stored == ARGV[1] then return {'same', stored} end
if ARGV[2] == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
  return {'accepted', stored}
end
return {'differs', stored}`

/** Compares the running key's fingerprint with the one the data in Redis was written under. */
export async function checkTagKeyFingerprint (client: RedisClient, { fingerprint, accept }: TagKeyCheck): Promise<TagKeyVerdict> {
  const reply = await storeCall('recipient tag key fingerprint', async () => await client.eval(CHECK, 1, TAG_KEY_FINGERPRINT, fingerprint, accept ?? ''))
  const [kind, stored] = Array.isArray(reply) ? reply as [string, string] : []
  switch (kind) {
    case 'same': case 'recorded': case 'accepted': return { kind }
    case 'differs': return { kind, stored: stored ?? '' }
    default: throw new Error(`unexpected reply from the tag key fingerprint script: ${JSON.stringify(reply)}`)
  }
}
