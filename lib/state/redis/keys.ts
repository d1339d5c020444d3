import type { KeyMode } from '../../keys/api-keys.js'
import { tenantScope } from '../../keys/scope.js'
import type { LimitHit, TenantLimitName } from '../admission.js'

/*
 * Every key name the service has in Redis, built here and nowhere else: the rest of the
 * service names its state by identifiers (tenant, mode, requestId, limit and bucket, lane
 * subject…), and the Redis adapter turns them into keys with this module. The names are a
 * contract with the instances already deployed (a rolling upgrade runs old and new on one
 * Redis): test/lib/state/redis/key-names.test.ts holds them to the list those instances use.
 * The one namespace built elsewhere is @fastify/rate-limit's, ROUTE_LIMIT_NAMESPACE
 * (lib/state/route-limits.ts), since the plugin names its own keys.
 *
 * The part in braces is the Redis Cluster hash tag, the part of a key that picks its slot.
 * Every key one script touches carries the same tag, so the script runs on one slot:
 *   {<tenant>:<mode>}        a tenant's traffic in one mode: tokens, velocity, lockout,
 *                            suppression, quota, its mailbox counts, idempotency, receipts,
 *                            verification stories, insights buckets
 *   {mailbox:<mode>:<lane>}  the service-wide bucket of one mailbox (its own slot: on a
 *                            Cluster it is counted by a second command, lib/state/redis/admission.ts)
 *   {<tenant>}               the sandbox inbox: its addresses' boxes and their index
 *   {webhooks:<tenant>}      a tenant's webhook queue;  {webhooks}  the queue index
 *
 * Four names are derived inside scripts from a key they were given, and so share its slot: a
 * token set aside by a verify (`<token key>:used:<attempt>`, until the verify's outcome is
 * known), a mailbox's lockout state (`<lockout prefix><lane subject>`, the subject being
 * read from the token, whose tag the prefix carries), a sandbox box the inbox forgets
 * (`<sandbox entries prefix><address>`, the address being read from the tenant's index) and
 * an insights bucket the verification log counts in (`<insights prefix>h:<hour>` and
 * `<insights prefix>d:<day>`, from the request time its story keeps).
 */

/** The hash tag of a tenant's traffic in one mode, `{acme:live}`. */
function scopeTag (tenantId: string, mode: KeyMode): string {
  return `{${tenantScope(tenantId, mode)}}`
}

/** A code's record: `otp:{acme:live}:<requestId>`. */
export function tokenKey (tenantId: string, mode: KeyMode, requestId: string): string {
  return `otp:${scopeTag(tenantId, mode)}:${requestId}`
}

/** The namespace of velocity counters, as @fastify/rate-limit names them. */
const VELOCITY = 'rl:'

/** A tenant's velocity bucket for one limit (`s`ource, `b`ackend, `r`ecipient, `k`ey). */
function velocityBucket (limit: TenantLimitName, tenantId: string, mode: KeyMode, bucket: string): string {
  return `${VELOCITY}${limit[0] ?? ''}:${scopeTag(tenantId, mode)}:${bucket}`
}

/** A mailbox's service-wide bucket (its lane subject), tagged by the mailbox. */
function mailboxBucket (mode: KeyMode, laneSubject: string): string {
  return `${VELOCITY}m:{mailbox:${mode}:${laneSubject}}`
}

/**
 * A tenant's mailbox count in a lane (lib/state/admission.ts, MailboxCap: its reserve inside
 * the mailbox cap), in the tenant's slot: the dispatch script reads and counts it on a Cluster
 * too. Instances that predate the reserve neither read nor write it.
 */
export function mailboxCountKey (tenantId: string, mode: KeyMode, laneSubject: string): string {
  return `${VELOCITY}mc:${scopeTag(tenantId, mode)}:${laneSubject}`
}

/** The counter of a limit a request counts against. */
export function limitKey (limit: LimitHit): string {
  return limit.name === 'mailbox' ? mailboxBucket(limit.mode, limit.bucket) : velocityBucket(limit.name, limit.tenantId, limit.mode, limit.bucket)
}

/** Where a recipient's wrong guesses are counted, per tenant and mode; the lane subject follows. */
export function lockoutKeyPrefix (tenantId: string, mode: KeyMode): string {
  return `lockout:${scopeTag(tenantId, mode)}:`
}

/** A mailbox's lockout state in one lane. */
export function lockoutKey (tenantId: string, mode: KeyMode, laneSubject: string): string {
  return lockoutKeyPrefix(tenantId, mode) + laneSubject
}

/** A mailbox's suppression, per tenant and mode, in the tenant's slot so the dispatch script reads it. */
export function suppressionKey (tenantId: string, mode: KeyMode, recipientTag: string): string {
  return `suppressed:${scopeTag(tenantId, mode)}:${recipientTag}`
}

/**
 * A quota window's counter, `quota:{acme:live}:<windowId>`, or a restricted key's share of it,
 * `quota:{acme:live}:k:<key id>:<windowId>`. `scope` is the tenant scope (`acme:live`).
 */
export function quotaKey (scope: string, share: string | null, windowId: string): string {
  return share === null ? `quota:{${scope}}:${windowId}` : `quota:{${scope}}:k:${share}:${windowId}`
}

/**
 * An Idempotency-Key's record and the lock of its attempt in flight. Distinct type markers, so
 * a user's key ending in a suffix can never name another's lock.
 */
export function idempotencyKeys (scope: string, key: string): [record: string, lock: string] {
  const base = `idem:{${scope}}:`
  return [`${base}r:${key}`, `${base}l:${key}`]
}

/** A redeemed receipt. */
export function redemptionKey (scope: string, jti: string): string {
  return `receipt:{${scope}}:${jti}`
}

/**
 * The fingerprint of the recipient tag key that suppressions, lockouts and recipient counts are
 * kept under (lib/recipients/tag.ts). The one key without an expiry: it outlives all of them.
 */
export const TAG_KEY_FINGERPRINT = 'recipient-tag:fingerprint'

/**
 * On a Cluster, copies of TAG_KEY_FINGERPRINT spread over the slots, so that an instance
 * starting while a primary is down still finds the fingerprint on the others. Each tag hashes
 * to slot 1024 × its place in the list (0, 1024, … 15360): every primary that serves 1024
 * consecutive slots holds at least one copy (every primary of a Cluster of up to 16 whose
 * slots are spread evenly, as `redis-cli --cluster create` and managed services do). Fixed
 * names rather than one per primary of the slot map: a reshard moves a copy with its slot and
 * leaves none behind that RECIPIENT_TAG_KEY_ACCEPT would miss.
 */
export const TAG_KEY_FINGERPRINT_COPIES: readonly string[] = [
  'fp10235', 'fp7381', 'fp9531', 'fp28334', 'fp40510', 'fp19401', 'fp21500', 'fp5477',
  'fp2695', 'fp10053', 'fp2258', 'fp9757', 'fp13882', 'fp4936', 'fp5611', 'fp18940'
].map((tag) => `${TAG_KEY_FINGERPRINT}:{${tag}}`)

/** Where a scope's redemption epoch lives, in the slot of its redemptions. */
export function epochKey (scope: string): string {
  return `receipt-epoch:{${scope}}`
}

/**
 * A sandbox address's messages as earlier versions wrote them (one JSON object each): still
 * read, so that a rolling upgrade loses none of the last hour's messages; no longer written.
 */
export function sandboxKey (tenantId: string, address: string): string {
  return `sandbox:{${tenantId}}:${address.toLowerCase()}`
}

/**
 * A sandbox address's messages, in lib/state/redis/sandbox-entry.ts's format. A key of its
 * own, in the same slot as sandboxKey: an instance of an earlier version, which parses every
 * entry of sandboxKey as JSON, never meets one it cannot read.
 */
export function sandboxEntriesKey (tenantId: string, address: string): string {
  return sandboxEntriesKeyPrefix(tenantId) + address.toLowerCase()
}

/** Where a tenant's sandbox boxes are, the address follows: the inbox script builds the keys of the boxes it forgets. */
export function sandboxEntriesKeyPrefix (tenantId: string): string {
  return `sandbox-entries:{${tenantId}}:`
}

/**
 * A part's pieces around the code, kept once for the sandbox messages that name them (one set a
 * minute per locale and part: lib/state/redis/sandbox-entry.ts), by the SHA-256 of their value,
 * in the slot of the tenant's boxes.
 */
export function sandboxPiecesKey (tenantId: string, id: string): string {
  return `sandbox-pieces:{${tenantId}}:${id}`
}

export interface SandboxShareKeys {
  /** A sorted set: the tenant's addresses, scored by their box's last write (ms on Redis's clock). */
  boxes: string
  /** A hash: address → bytes of its box's entries. */
  bytes: string
  /** The bytes of all the tenant's boxes: a key of its own, so that no address can name it. */
  total: string
}

/**
 * A tenant's share of the sandbox inbox: its sandbox key can be public (the demo key is), so
 * without a bound of its own one tenant could fill Redis for an hour and, under `noeviction`,
 * have every tenant's writes refused. In the slot of the tenant's boxes, so that the inbox
 * script writes a message and trims the share in one step.
 */
export function sandboxShareKeys (tenantId: string): SandboxShareKeys {
  return { boxes: `sandbox-boxes:{${tenantId}}`, bytes: `sandbox-bytes:{${tenantId}}`, total: `sandbox-total:{${tenantId}}` }
}

/**
 * A tenant's verification stories in one mode, all in the scope's slot: the index of the stories
 * its backend dispatched by when they were requested (`vlog:{acme:live}`), that of its pages'
 * (`vlog:browser:{acme:live}`: no story key starts so), and each story (`vlog:{acme:live}:<requestId>`).
 */
export function verificationLogKeys (tenantId: string, mode: KeyMode): { index: string, browserIndex: string, story: (requestId: string) => string } {
  const index = `vlog:${scopeTag(tenantId, mode)}`
  return { index, browserIndex: `vlog:browser:${scopeTag(tenantId, mode)}`, story: (requestId) => `${index}:${requestId}` }
}

/**
 * Where a tenant's funnel is counted in one mode (GET /insights): one hash per hour,
 * `insights:{acme:live}:h:<hour>`, and per day, `insights:{acme:live}:d:<day>` (hours and days
 * since the epoch, UTC), in the scope's slot, so that the verification log's script counts in
 * them and one pipeline reads a range. The verification log's script derives the names from the
 * prefix (INSIGHTS_BUCKET_LUA).
 */
export function insightsKeyPrefix (tenantId: string, mode: KeyMode): string {
  return `insights:${scopeTag(tenantId, mode)}:`
}

/** One bucket: its granularity's letter and its number (hours or days since the epoch). */
export function insightsBucketKey (tenantId: string, mode: KeyMode, granularity: 'hour' | 'day', number: number): string {
  return `${insightsKeyPrefix(tenantId, mode)}${granularity === 'hour' ? 'h' : 'd'}:${number}`
}

/**
 * A tenant's live sending reputation: one hash per hour of the window (fields `sent`,
 * `bounced`, `complained`), `reputation:{acme:live}:<hour>`, in its live traffic's slot, so one
 * pipeline reads a window; and the one hash of every tenant's pause, field the tenant id.
 */
export function reputationBucketKey (tenantId: string, hour: number): string {
  return `reputation:${scopeTag(tenantId, 'live')}:${hour}`
}

export const REPUTATION_PAUSED_KEY = 'reputation:paused'

/** A handled SNS MessageId. */
export function feedbackKey (messageId: string): string {
  return `feedback:sns:${messageId}`
}

export interface WebhookTenantKeys {
  stream: string
  retry: string
  dead: string
  once: (key: string) => string
}

/** A tenant's webhook queue: its stream, retries, dead letters and once-per-key markers. */
export function webhookTenantKeys (tenant: string): WebhookTenantKeys {
  const prefix = `webhooks:{webhooks:${tenant}}:`
  return { stream: `${prefix}stream`, retry: `${prefix}retry`, dead: `${prefix}dead`, once: (key) => `${prefix}once:${key}` }
}

const WEBHOOK_ROOT = 'webhooks:{webhooks}:'

/** Which tenants have webhook work, in the {webhooks} slot. */
export const WEBHOOK_INDEX = { tenants: `${WEBHOOK_ROOT}tenants`, version: `${WEBHOOK_ROOT}version`, deadTenants: `${WEBHOOK_ROOT}dead-tenants` } as const

/** The webhook queue before it was split per tenant, drained into the tenants' queues. */
export const WEBHOOK_LEGACY = { stream: `${WEBHOOK_ROOT}stream`, retry: `${WEBHOOK_ROOT}retry`, dead: `${WEBHOOK_ROOT}dead`, lock: `${WEBHOOK_ROOT}legacy-lock` } as const
