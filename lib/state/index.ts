import type { FeedbackDedupe } from './feedback-dedupe.js'
import { MemoryFeedbackDedupe } from './memory/feedback-dedupe.js'
import { RedisFeedbackDedupe } from './redis/feedback-dedupe.js'
import type { AdmissionStore } from './admission.js'
import { MemoryAdmission } from './memory/admission.js'
import { RedisAdmission } from './redis/admission.js'
import type { IdempotencyStore } from './idempotency.js'
import { MemoryIdempotencyStore } from './memory/idempotency-store.js'
import { RedisIdempotencyStore } from './redis/idempotency-store.js'
import { MemoryQuotaStore } from './memory/quota-store.js'
import type { QuotaStore } from './quota.js'
import { RedisQuotaStore } from './redis/quota-store.js'
import { MemoryRedemptionStore } from './memory/redemption-store.js'
import type { RedemptionStore } from './redemptions.js'
import { RedisRedemptionStore } from './redis/redemption-store.js'
import type { RedisTopology } from './redis/topology.js'
import { createToolRedisClient, type RedisClient } from './redis/client.js'
import { withinRequestBudget } from './redis/route-limits.js'
import { ROUTE_LIMIT_NAMESPACE, type RouteLimitStore } from './route-limits.js'
import { EvictionPolicyWatch, type EvictionLog } from './redis/eviction-policy.js'
import { ReplicaAcks } from './redis/replica-acks.js'
import { RedisServerWatch, type MisnamedServer, type ServerCheckLog } from './redis/server-check.js'
import { TagKeyGuard, tagKeyRefusal, type TagKeyCheck, type TagKeyLog } from './redis/tag-key-fingerprint.js'
import { MemorySandboxInbox } from './memory/sandbox-inbox.js'
import { RedisSandboxInbox } from './redis/sandbox-inbox.js'
import type { SandboxInbox } from './sandbox-inbox.js'
import { MemoryTokenStore } from './memory/token-store.js'
import { RedisTokenStore } from './redis/token-store.js'
import type { TokenStore } from './tokens.js'
import { MemoryWebhookQueue } from './memory/webhook-queue.js'
import type { WebhookQueue, WebhookQueueLimits } from './webhook-queue.js'
import { RedisWebhookQueue } from './redis/webhook-queue.js'
import type { VerificationLog, VerificationLogLimits } from './verification-log.js'
import { MemoryVerificationLog } from './memory/verification-log.js'
import { RedisVerificationLog } from './redis/verification-log.js'
import type { ReputationStore } from './reputation.js'
import { INSIGHTS_DEFAULTS, type InsightsLimits, type InsightsStore } from './insights.js'
import { MemoryInsights } from './memory/insights.js'
import { RedisInsights } from './redis/insights.js'
import { MemoryReputation } from './memory/reputation.js'
import { RedisReputation } from './redis/reputation.js'

export { connectRedis, type RedisClient } from './redis/client.js'
export type { RedisAccess, RedisNode, RedisTopology } from './redis/topology.js'

/**
 * Every store the service keeps state in, from one place: in this process (the embedded
 * default: one instance) or in Redis (any number of instances behave as one). This is the
 * only place that chooses.
 */
export interface State {
  readonly kind: 'memory' | 'redis'
  readonly tokens: TokenStore
  /** Velocity, lockout, quota reservation and the token write, counted in one step (lib/admission/gate.ts decides). */
  readonly admission: AdmissionStore
  readonly quota: QuotaStore
  readonly idempotency: IdempotencyStore
  readonly sandboxInbox: SandboxInbox
  /** Receipts already redeemed (each redeems once). */
  readonly redemptions: RedemptionStore
  /**
   * Webhook deliveries waiting or being retried, and the dead letters, one queue per tenant:
   * Redis streams shared by every instance and durable across their restarts; in memory, lost
   * when the process stops.
   */
  readonly webhookQueue: WebhookQueue
  /** Provider feedback messages already handled (SNS delivers at least once). */
  readonly feedbackDedupe: FeedbackDedupe
  /** Each verification's story (GET /verifications/{requestId}): observational, written off the request's round trip. */
  readonly verificationLog: VerificationLog
  /** Each tenant's funnel per hour and day (GET /insights): the log's events counted in its writes, and refusals. */
  readonly insights: InsightsStore
  /** Each tenant's live sends, bounces and complaints over the reputation window, and the pauses they caused (lib/reputation/). */
  readonly reputation: ReputationStore
  /** Where @fastify/rate-limit counts the routes outside admission: in Redis beside the other stores, or in its own memory. */
  readonly routeLimits: RouteLimitStore
  /**
   * The stores can answer and keep what they are given: Redis reachable, a primary of the
   * kind the settings name, and not allowed to evict keys (`reason` says what is wrong, for
   * operators); in memory, always.
   */
  ready (): Promise<StoresReadiness>
  /** Writes answered 503 (and undone where they could be) because too few Redis replicas acknowledged them. */
  unacknowledgedWrites (): number
  /** Stops what the stores started (sweep timers). A Redis client is closed by its owner. */
  close (): Promise<void>
}

export interface StoresReadiness {
  ok: boolean
  reason: string | null
  /** A setting the stores can never work with (the wrong kind of Redis server, another recipient tag key): start-up refuses it. */
  refused: MisnamedServer | null
  /** What works against the service without stopping it (too few replicas for REDIS_REPLICA_ACKS…). */
  warnings: string[]
  /** The fewest replicas connected to a Redis primary, against REDIS_REPLICA_ACKS. */
  replicas: { required: number, connected: number } | null
}

export interface StateOptions {
  /** Cap on live codes per tenant and mode in the in-memory token store. */
  memoryStoreMaxTokens: number
  /** How long a handled provider feedback message is remembered (its replay window). */
  feedbackDedupeTtlMs: number
  /** Redis replicas that must acknowledge what a dispatch, a verify or a redemption wrote (none when not given). */
  replicaAcks?: { count: number, timeoutMs: number }
  /** Each tenant's share of the webhook queue (the default cap when not given). */
  webhookQueue?: WebhookQueueLimits
  /** Where a Redis that may evict keys, or is not what the settings name, is reported (the service's logger; tools may leave it out). */
  log?: EvictionLog & ServerCheckLog & TagKeyLog
  /** How long verification stories are kept, and how many per tenant and mode (defaults when not given). */
  verificationLog?: VerificationLogLimits
  /** How long the funnel's buckets are kept (INSIGHTS_DAYS; 90 days when not given). */
  insights?: InsightsLimits
  /** REPUTATION_WINDOW (24 hours when not given). */
  reputationWindowMs?: number
  /** The Redis settings the client was made from, so that a misnamed server is told apart from one that does not answer. */
  topology?: RedisTopology
  /** How long a probe of a listed Sentinel or Cluster node may take to connect. */
  connectTimeoutMs?: number
  /** The recipient tag key's fingerprint, held to the one Redis's data was written under (not checked when not given). */
  tagKey?: TagKeyCheck
}

/** VERIFICATION_LOG_DAYS and VERIFICATION_LOG_MAX_PER_TENANT's defaults. */
const VERIFICATION_LOG_DEFAULTS: VerificationLogLimits = { retentionMs: 7 * 86_400_000, maxPerScope: 100_000 }

export function createState (redis: RedisClient | null, options: StateOptions): State {
  const logLimits = options.verificationLog ?? VERIFICATION_LOG_DEFAULTS
  const insightsLimits = options.insights ?? INSIGHTS_DEFAULTS
  const reputationWindow = { windowMs: options.reputationWindowMs ?? 86_400_000 }
  if (redis === null) {
    const tokens = new MemoryTokenStore({ maxTokensPerScope: options.memoryStoreMaxTokens })
    const quota = new MemoryQuotaStore()
    const idempotency = new MemoryIdempotencyStore()
    const redemptions = new MemoryRedemptionStore()
    const webhookQueue = new MemoryWebhookQueue(options.webhookQueue)
    const insights = new MemoryInsights(insightsLimits)
    const verificationLog = new MemoryVerificationLog(logLimits, { insights })
    const reputation = new MemoryReputation(reputationWindow)
    return {
      kind: 'memory',
      tokens,
      admission: new MemoryAdmission(tokens, quota),
      quota,
      idempotency,
      sandboxInbox: new MemorySandboxInbox(),
      redemptions,
      webhookQueue,
      feedbackDedupe: new MemoryFeedbackDedupe(options.feedbackDedupeTtlMs),
      verificationLog,
      insights,
      reputation,
      routeLimits: { nameSpace: ROUTE_LIMIT_NAMESPACE, redis: null },
      ready: async () => ({ ok: await tokens.ready(), reason: null, refused: null, warnings: [], replicas: null }),
      unacknowledgedWrites: () => acks.shortfalls,
      close: async () => {
        idempotency.close()
        await Promise.all([tokens.close(), redemptions.close(), webhookQueue.close(), verificationLog.close(), insights.close(), reputation.close()])
      }
    }
  }
  const tokens = new RedisTokenStore(redis)
  const log = options.log ?? { error: () => {}, warn: () => {}, info: () => {} }
  const eviction = new EvictionPolicyWatch(redis, log)
  const replicaAcks = options.replicaAcks ?? { count: 0, timeoutMs: 0 }
  const acks = new ReplicaAcks(redis, replicaAcks)
  const tagKey = options.tagKey === undefined ? null : new TagKeyGuard(redis, options.tagKey, log)
  const verificationLog = new RedisVerificationLog(redis, logLimits, insightsLimits)
  const insights = new RedisInsights(redis, insightsLimits)
  const reputation = new RedisReputation(redis, reputationWindow)
  const servers = new RedisServerWatch(redis, { topology: options.topology ?? null, requiredAcks: replicaAcks.count, connectTimeoutMs: options.connectTimeoutMs ?? 1000, log })
  return {
    kind: 'redis',
    tokens,
    admission: new RedisAdmission(redis, acks),
    quota: new RedisQuotaStore(redis),
    idempotency: new RedisIdempotencyStore(redis),
    sandboxInbox: new RedisSandboxInbox(redis),
    redemptions: new RedisRedemptionStore(redis, { acks }),
    webhookQueue: new RedisWebhookQueue(redis, options.webhookQueue),
    feedbackDedupe: new RedisFeedbackDedupe(redis, options.feedbackDedupeTtlMs),
    verificationLog,
    insights,
    reputation,
    routeLimits: { nameSpace: ROUTE_LIMIT_NAMESPACE, redis: withinRequestBudget(redis) },
    ready: async () => {
      // Side by side, each read of a node bounded (READINESS_READ_MS): a frozen primary delays
      // a check by that bound once, not once per kind of reading.
      const [answers, { misnamed, warnings, replicas }, standing, { ok, reason }] = await Promise.all([
        tokens.ready(), servers.check(), tagKey?.check() ?? { kind: 'matched' as const }, eviction.check()
      ])
      const found = { refused: misnamed, warnings, replicas }
      if (misnamed !== null) return { ok: false, reason: `${misnamed.variable} ${misnamed.problem}`, ...found }
      if (!answers) return { ok: false, reason: 'Redis does not answer', ...found }
      if (standing.kind === 'differs') {
        const refused = tagKeyRefusal(standing.stored, options.tagKey?.fingerprint ?? '')
        return { ok: false, reason: `${refused.variable} ${refused.problem}`, ...found, refused }
      }
      // Unread (Redis stalled): read again on the next check; the stores answer 503 meanwhile anyway.
      if (standing.kind === 'unread') return { ok: false, reason: 'RECIPIENT_TAG_KEY could not be compared with the key the data in Redis was written under (Redis did not answer)', ...found }
      return { ok, reason, ...found }
    },
    unacknowledgedWrites: () => acks.shortfalls,
    // The events of the last turn, and the refusals tallied, are written before the caller closes the client.
    close: async () => { await Promise.all([verificationLog.close(), insights.close(), reputation.close()]) }
  }
}

/**
 * The reputation store in Redis for a command-line tool (`email-otp tenants resume`), on a
 * short-lived connection of its own: `close` ends it.
 */
export function openRedisReputation (topology: RedisTopology, windowMs: number): { reputation: ReputationStore, close: () => void } {
  const client = createToolRedisClient(topology)
  client.on('error', () => {})
  return { reputation: new RedisReputation(client, { windowMs }), close: () => { client.disconnect() } }
}

/**
 * The webhook queue in Redis for a command-line tool, on a short-lived connection of its own:
 * `close` ends it. Its errors surface as the queue's rejections, not as events.
 */
export function openRedisWebhookQueue (topology: RedisTopology, limits: WebhookQueueLimits): { queue: WebhookQueue, close: () => void } {
  const client = createToolRedisClient(topology)
  client.on('error', () => {})
  return { queue: new RedisWebhookQueue(client, limits), close: () => { client.disconnect() } }
}
