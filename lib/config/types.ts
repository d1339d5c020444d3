import type { Env } from '../../schemas/env.js'
import type { LockoutPolicy } from '../limits/lockout-policy.js'
import type { RateLimit, VelocityLimits } from '../limits/rate-limit.js'
import type { MacKey } from '../keys/mac-key.js'
import type { MailerConfig } from '../mail/delivery/mailer.js'
import type { MeshGateways, MeshIdentityHeader } from '../net/workload-identity.js'
import type { ReceiptKeyMaterial } from '../receipts/signing-keys.js'
import type { RedisTopology } from '../state/index.js'
import type { TracingConfig } from '../telemetry/config.js'

/**
 * The service's configuration: what lib/config/from-env.ts reads from the environment. The
 * mail providers' settings are the mailer's own (MailerConfig: `mailTransports`,
 * `mailTimeoutMs`, `mailBreaker`, `ses`, `smtpUrl`).
 */
export interface Config extends MailerConfig {
  host: string
  port: number
  logLevel: Env['LOG_LEVEL']
  tenantsFile: string | null
  /** The root of the tenants' template folders (`<root>/<tenant id>/`); null without a tenants file. */
  templatesDir: string | null
  /** TENANTS_FILE_MAX_BYTES: a larger tenants file is refused before it is read. */
  tenantsFileMaxBytes: number
  redisUrl: string | null
  /** Null on the embedded (in-memory) default. */
  redis: RedisTopology | null
  redisCommandTimeoutMs: number
  /** Replicas that must acknowledge a dispatch's or verify's write, and how long to wait for them. */
  redisReplicaAcks: { count: number, timeoutMs: number }
  hmacKeys: MacKey[]
  /** True when no OTP_HMAC_KEYS was given and a process-local key was generated. */
  hmacKeyGenerated: boolean
  /**
   * The key of recipient tags and derived address hashes (RECIPIENT_TAG_KEY), which never
   * rotates with `hmacKeys`. Unset, the secret of the only HMAC key, whose id `borrowedFrom`
   * names (null when the variable is set, or on the embedded default's per-process key).
   */
  /** `accept`: RECIPIENT_TAG_KEY_ACCEPT, the fingerprint of a new key to adopt over the one Redis's data was written under. */
  recipientTagKey: { secret: Buffer, borrowedFrom: string | null, accept: string | null }
  otpTtlSeconds: number
  memoryStoreMaxTokens: number
  /** SNS topics whose messages POST /feedback/ses accepts, and where their signing certificates may come from. */
  sesFeedback: { topicArns: ReadonlySet<string>, certUrlPattern: RegExp }
  /** How long a suppression lasts. */
  suppressionMs: number
  mailFrom: string
  bodyLimitBytes: number
  trustProxy: string[]
  /** Where a trusted sidecar passes the caller's workload identity; null: not read. */
  meshIdentityHeader: MeshIdentityHeader | null
  /** The identities whose requests are counted per forwarded end client; null: `none`, or no mesh identity read. */
  meshGateways: MeshGateways | null
  shutdownGraceMs: number
  shutdownDrainMs: number
  blocklists: { ipSources: string[], torSource: string | null, refreshMs: number }
  ipv6BucketPrefix: number
  rateLimits: VelocityLimits
  /** The service-wide cap per mailbox across tenants; null when switched off. */
  mailboxLimit: RateLimit | null
  /** Limits of the routes outside the OTP admission step: per key (account), per tenant (preview), per client (public). */
  routeLimits: { account: RateLimit, preview: RateLimit, public: RateLimit }
  lockout: LockoutPolicy
  metricsToken: string | null
  /** The internal listener for /metrics and readiness details; null when METRICS_PORT is unset. */
  metricsListener: { host: string, port: number } | null
  requestTimeoutMs: number
  captchaTimeoutMs: number
  keepAliveTimeoutMs: number
  maxConnectionsPerSource: number
  /** How refusals to one source are paced (lib/net/refusal-pacing.ts); null when off. */
  refusalPace: { perSecond: number, burst: number, maxDelayMs: number } | null
  receipts: {
    /** Null: derived from the HMAC keys (see lib/receipts/signing-keys.ts). */
    signingKeys: ReceiptKeyMaterial[] | null
    issuer: string
    ttlSeconds: number
  }
  webhooks: {
    timeoutMs: number
    concurrencyPerEndpoint: number
    maxInFlightPerTenant: number
    maxQueuedPerTenant: number
    retry: { baseMs: number, maxDelayMs: number, forMs: number }
    allowHttpLoopback: boolean
    allowedNetworks: string[]
  }
  /** OpenTelemetry tracing; null when off (no OTLP endpoint set, or OTEL_TRACES_EXPORTER=none). */
  tracing: TracingConfig | null
}
