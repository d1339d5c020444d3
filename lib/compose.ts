import type { Writable } from 'node:stream'
import type { Logger } from 'pino'
import { AdmissionGate } from './admission/gate.js'
import { admissionPolicy } from './admission/plan.js'
import { ConfigError } from './config/from-env.js'
import type { Config } from './config/types.js'
import { applyFeedback } from './feedback/apply.js'
import { DEDUPE_TTL_MS, SesFeedback, type FeedbackEventType } from './feedback/ses-feedback.js'
import type { FailoverObserver } from './mail/delivery/failover.js'
import { Mailer, type MailSendObserver } from './mail/delivery/mailer.js'
import { TemplatePreviews } from './previews/template-previews.js'
import { loadBlocklists, type Blocklists } from './net/blocklist.js'
import { IpRangeSet } from './net/ip-ranges.js'
import { OtpService, type OtpObserver } from './otp/service.js'
import { CodeSigner } from './otp/signer.js'
import { UsageService } from './quota/usage.js'
import { VerificationStories } from './otp/verification-story.js'
import { InsightsReports } from './otp/insights.js'
import { AddressHasher } from './receipts/address-hash.js'
import { ReceiptIssuer } from './receipts/receipt-issuer.js'
import { Receipts } from './receipts/receipts.js'
import { deriveReceiptSigningKeys, prepareSigningKeys } from './receipts/signing-keys.js'
import { RecipientTagger, tagKeyFingerprint } from './recipients/tag.js'
import { ReputationGuard } from './reputation/guard.js'
import { SandboxMessages } from './sandbox/messages.js'
import { connectRedis, createState, type RedisClient, type State } from './state/index.js'
import type { Backlog } from './state/webhook-queue.js'
import { TenantTurns } from './fairness/turns.js'
import { openTenantDirectory, type TenantDirectory } from './tenants-file/directory.js'
import { AddressPolicy } from './webhooks/address-policy.js'
import { EventSink, OverflowReporter } from './webhooks/events.js'
import { sendWebhook } from './webhooks/sender.js'
import { anyEndpoint, WebhookWorker, type AttemptOutcome } from './webhooks/worker.js'

type LogLines = Pick<Logger, 'info' | 'warn' | 'error'>

/** Where the services log: the server's logger, or a tool's quiet one. */
export type ServicesLog = LogLines & { child: (bindings: Record<string, unknown>) => LogLines }

/** What the host counts (the server's Prometheus metrics); lib never sees the metrics library. */
export interface ServicesObservers {
  otp?: OtpObserver
  /** A mail provider failed over to the next one, or was skipped (its circuit open). */
  mailFailover?: FailoverObserver
  mailSend?: MailSendObserver
  webhookAttempted?: (outcome: AttemptOutcome) => void
  /** Deliveries moved to dead letters because their tenant's queue was full. */
  webhookOverflowed?: (count: number) => void
  /** One recipient's SES event of a tenant's mail. */
  feedback?: (tenant: string, type: FeedbackEventType, bounceType: 'permanent' | 'transient' | undefined) => void
  /** A tenant's live sending was paused or resumed, as this process reads the shared pauses. */
  sendingPaused?: (tenant: string, paused: boolean) => void
}

export interface ServicesOptions {
  log: ServicesLog
  /** Where the log mail transport prints (stdout when not given). */
  mailLog?: Writable
  /**
   * The Redis connection, when the caller has one (and closes it itself). Not given: one is
   * made from the configuration's topology (none on the in-memory default) and closed by close().
   */
  redis?: RedisClient | null
  observers?: ServicesObservers
}

/** The whole service graph, built from the configuration in one place. */
export interface Services {
  /** The shared Redis connection, or null on the in-memory default. */
  readonly redis: RedisClient | null
  /** Every store: tokens, admission counters, quota, idempotency, sandbox inbox, webhook queue. */
  readonly state: State
  readonly tenants: TenantDirectory
  readonly blocklists: Blocklists
  readonly mailer: Mailer
  readonly receipts: Receipts
  /** Reports events to the tenants' webhook endpoints; this process's worker delivers them once started. */
  readonly webhooks: EventSink
  readonly otp: OtpService
  readonly feedback: SesFeedback
  readonly usage: UsageService
  readonly verifications: VerificationStories
  /** Each tenant's funnel (GET /insights), from the insights store. */
  readonly insights: InsightsReports
  readonly sandbox: SandboxMessages
  readonly previews: TemplatePreviews
  /** Each tenant's live sending reputation: the counts, and the pauses dispatch asks about. */
  readonly reputation: ReputationGuard
  /** Webhook deliveries queued per tenant of the tenants file. */
  webhookBacklogs (): Promise<Array<[string, Backlog]>>
  /** Checks the stores (a Redis allowed to evict keys, or short of replicas, is logged; one of the wrong kind refused) and starts delivering webhooks. */
  start (): Promise<void>
  /** Stops everything started, in order (the webhook worker settles its attempts first); idempotent. */
  close (): Promise<void>
}

/** How often each instance looks for deliveries another instance queued or a retry that fell due. */
const WEBHOOK_POLL_MS = 1000
/** Webhook attempts in flight per process, all tenants together (each tenant at most WEBHOOK_MAX_IN_FLIGHT_PER_TENANT of them). */
const WEBHOOK_MAX_IN_FLIGHT = 64
/** Past an attempt's timeout by this much, a held delivery is taken to be lost with its process. */
const WEBHOOK_STUCK_MARGIN_MS = 30_000
/**
 * The event loop's time per turn for composing messages when tenants wait for it
 * (lib/fairness/turns.ts): about one costly message (a tenant's largest templates take 0.3–1 ms
 * to fill in), so another tenant's waits for one of them, not for a queue.
 */
const COMPOSE_QUANTUM_MS = 1

function redisConnectTimeoutMs (config: Config): number {
  return Math.max(1000, config.redisCommandTimeoutMs * 2)
}

/**
 * Verification receipts' issuer: signing keys from RECEIPT_SIGNING_KEYS, else derived from
 * OTP_HMAC_KEYS so that every instance publishes and signs with the same keys.
 */
async function receiptIssuer (config: Config, log: LogLines): Promise<ReceiptIssuer> {
  let material = config.receipts.signingKeys
  if (material === null) {
    material = await deriveReceiptSigningKeys(config.hmacKeys)
    if (config.hmacKeyGenerated) {
      log.warn('RECEIPT_SIGNING_KEYS is not set: receipts are signed with a per-process key, which changes on every restart (set RECEIPT_SIGNING_KEYS, or OTP_HMAC_KEYS)')
    } else {
      log.info('RECEIPT_SIGNING_KEYS is not set: receipts are signed with keys derived from OTP_HMAC_KEYS')
    }
  }
  return new ReceiptIssuer({ keys: await prepareSigningKeys(material), issuer: config.receipts.issuer, ttlSeconds: config.receipts.ttlSeconds })
}

const NO_OTP_OBSERVER: OtpObserver = { dispatched () {}, checked () {}, locked () {}, reviewed () {} }

/**
 * The composition root: every domain object of the service, built from the configuration, with
 * one close(). The server (plugins/services.ts) and the benchmarks call it; what only a host
 * has (its logger, its metrics, a Redis connection of its own) comes in `options`. Rejects when
 * a part cannot be built (a tenants file that does not load, say), having closed what it had
 * built.
 */
export async function createServices (config: Config, options: ServicesOptions): Promise<Services> {
  const { log } = options
  const observers = options.observers ?? {}
  const stops: Array<() => Promise<void> | void> = []
  // Newest first, each one whatever the others did: a mailer that fails to close must not
  // leave the stores or the Redis connection open.
  const stopAll = async (): Promise<void> => {
    const failures: unknown[] = []
    for (const stop of [...stops].reverse()) {
      try {
        await stop()
      } catch (error) {
        failures.push(error)
      }
    }
    if (failures.length > 0) throw new AggregateError(failures, 'closing the services failed')
  }
  try {
    let redis: RedisClient | null
    if (options.redis === undefined) {
      redis = config.redis === null ? null : await connectRedis(config.redis, { commandTimeoutMs: config.redisCommandTimeoutMs, connectTimeoutMs: redisConnectTimeoutMs(config) }, log)
      const owned = redis
      if (owned !== null) stops.push(() => { owned.disconnect() })
    } else {
      redis = options.redis
    }

    const state = createState(redis, {
      memoryStoreMaxTokens: config.memoryStoreMaxTokens,
      feedbackDedupeTtlMs: DEDUPE_TTL_MS,
      replicaAcks: config.redisReplicaAcks,
      webhookQueue: { perTenant: config.webhooks.maxQueuedPerTenant },
      verificationLog: config.verificationLog,
      insights: config.insights,
      ...(config.reputation === null ? {} : { reputationWindowMs: config.reputation.windowMs }),
      log,
      ...(config.redis === null
        ? {}
        : {
            topology: config.redis,
            connectTimeoutMs: redisConnectTimeoutMs(config),
            tagKey: { fingerprint: tagKeyFingerprint(config.recipientTagKey.secret), accept: config.recipientTagKey.accept }
          })
    })
    stops.push(async () => { await state.close() })
    const tenants = await openTenantDirectory(config, log)
    stops.push(() => { tenants.close() })
    const blocklists = await loadBlocklists(config.blocklists, log)
    stops.push(() => { blocklists.stop() })

    const mailer = new Mailer(config, {
      sandboxInbox: state.sandboxInbox,
      logOutput: options.mailLog ?? process.stdout,
      failover: {
        failedOver (from, kind) {
          observers.mailFailover?.failedOver(from, kind)
          log.warn({ transport: from, kind }, 'mail provider failed; trying the next one')
        },
        skipped (transport) {
          observers.mailFailover?.skipped(transport)
        }
      },
      ...(observers.mailSend === undefined ? {} : { sent: observers.mailSend })
    })
    stops.push(async () => { await mailer.close() })
    const receipts = new Receipts(await receiptIssuer(config, log), new AddressHasher(config.recipientTagKey.secret), state.redemptions, state.verificationLog)

    const queue = state.webhookQueue
    const policy = new AddressPolicy({
      allowLoopback: config.webhooks.allowHttpLoopback,
      allowedNetworks: config.webhooks.allowedNetworks.length === 0 ? null : IpRangeSet.fromEntries(config.webhooks.allowedNetworks).set
    })
    const webhookLog = log.child({ component: 'webhooks' })
    const overflow = new OverflowReporter(webhookLog, (count) => { observers.webhookOverflowed?.(count) })
    const worker = new WebhookWorker({
      queue,
      endpoint: (tenantId, url) => tenants.current.tenants.get(tenantId)?.webhooks.find((endpoint) => endpoint.url === url) ?? null,
      active: () => anyEndpoint(tenants.current),
      send: async (endpoint, delivery, signal) => await sendWebhook(endpoint, delivery, { policy, timeoutMs: config.webhooks.timeoutMs, userAgent: 'email-otp-webhooks' }, signal),
      schedule: config.webhooks.retry,
      perEndpoint: config.webhooks.concurrencyPerEndpoint,
      perTenant: config.webhooks.maxInFlightPerTenant,
      maxInFlight: WEBHOOK_MAX_IN_FLIGHT,
      pollMs: Math.min(WEBHOOK_POLL_MS, config.webhooks.retry.baseMs),
      stuckMs: config.webhooks.timeoutMs + WEBHOOK_STUCK_MARGIN_MS,
      log: webhookLog,
      attempted: (outcome) => { observers.webhookAttempted?.(outcome) },
      overflowed: overflow.report
    })
    // Stopped before the stores its queue lives in, its attempts settled.
    stops.push(async () => { await worker.close() })
    if (state.kind === 'memory') {
      webhookLog.info('webhook queue in memory: deliveries waiting or dead are lost when the process stops (set REDIS_URL for a durable queue)')
    }
    const webhooks = new EventSink(queue, { log: webhookLog, queued: () => { worker.wake() }, overflowed: overflow.report })

    if (config.hmacKeyGenerated) {
      log.warn('OTP_HMAC_KEYS is not set: codes are signed with a key generated for this process only; set it in production')
    }
    const { borrowedFrom } = config.recipientTagKey
    if (borrowedFrom !== null) {
      log.warn(`RECIPIENT_TAG_KEY is not set: recipient tags and address hashes are keyed by the secret of OTP_HMAC_KEYS key "${borrowedFrom}"; set RECIPIENT_TAG_KEY to that secret before adding a key to OTP_HMAC_KEYS, or the rotation cannot start`)
    }
    const reputation = new ReputationGuard({
      store: state.reputation,
      settings: config.reputation,
      // With SES feedback, SES reports the bounces: a partner's own report of one would count it twice.
      countPartnerReports: config.sesFeedback.topicArns.size === 0,
      tenant: (id) => tenants.current.tenants.get(id),
      webhooks,
      log,
      changed: (tenant, paused) => { observers.sendingPaused?.(tenant, paused) }
    })
    stops.push(async () => { await reputation.close() })
    const otp = new OtpService({
      policy: admissionPolicy(config),
      signer: new CodeSigner(config.hmacKeys),
      tagger: new RecipientTagger(config.recipientTagKey.secret),
      gate: AdmissionGate.over(state),
      stores: state,
      mailer,
      defaults: { ttlSeconds: config.otpTtlSeconds, mailFrom: config.mailFrom },
      suppressionMs: config.suppressionMs,
      ipv6BucketPrefix: config.ipv6BucketPrefix,
      receipts,
      events: webhooks,
      observer: observers.otp ?? NO_OTP_OBSERVER,
      turns: new TenantTurns(COMPOSE_QUANTUM_MS),
      verifications: state.verificationLog,
      reputation
    })

    // SES feedback (lib/feedback/apply.ts). MessageIds are remembered in Redis when there is
    // one, so every instance handles a message once.
    const applyEffects = applyFeedback({ receipts, mailboxes: otp, webhooks, verifications: state.verificationLog, reputation, log })
    const feedback = new SesFeedback({
      topicArns: config.sesFeedback.topicArns,
      certUrlPattern: config.sesFeedback.certUrlPattern,
      dedupe: state.feedbackDedupe,
      tenant: (id) => tenants.current.tenants.get(id),
      async apply (feedback) {
        await applyEffects(feedback)
        // Counted once handled: a message that failed half-way is sent again by SNS.
        observers.feedback?.(feedback.tenant.id, feedback.type, feedback.bounceType)
      },
      // One line per failure: the messages naming the URL for the next minute are answered
      // 503 and counted (email_otp_ses_feedback_total{outcome="unavailable"}), not logged.
      certificateFailed (url, reason) {
        log.warn({ certificateUrl: url, reason }, 'SNS signing certificate could not be fetched; messages naming it are answered 503 for a minute (SNS retries)')
      }
    })

    let started = false
    let closing: Promise<void> | null = null
    return {
      redis,
      state,
      tenants,
      blocklists,
      mailer,
      receipts,
      webhooks,
      otp,
      feedback,
      usage: new UsageService(state.quota),
      verifications: new VerificationStories(state.verificationLog),
      insights: new InsightsReports(state.insights, config.insights),
      sandbox: new SandboxMessages(state.sandboxInbox),
      previews: new TemplatePreviews(config.otpTtlSeconds),
      reputation,
      async webhookBacklogs () {
        return await Promise.all(
          [...tenants.current.tenants.keys()].map(async (tenant): Promise<[string, Backlog]> => [tenant, await queue.backlog(tenant)])
        )
      },
      async start () {
        if (started || closing !== null) return
        started = true
        // A Redis that does not answer yet is waited for (not ready, 503s); one that answers as
        // the wrong kind of server (a replica, a Cluster node behind REDIS_URL) never will serve.
        const { refused } = await state.ready()
        if (refused !== null) throw new ConfigError(refused.variable, refused.problem)
        worker.start()
        reputation.start()
      },
      async close () {
        closing ??= stopAll()
        await closing
      }
    }
  } catch (error) {
    // The error that stopped the build is the one to report.
    await stopAll().catch(() => {})
    throw error
  }
}
