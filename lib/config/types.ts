import type { TracingConfig } from '../telemetry/config.js'
import type { AbuseConfig } from './abuse.js'
import type { FeedbackConfig } from './feedback.js'
import type { ReputationConfig } from './reputation.js'
import type { LimitsConfig } from './limits.js'
import type { ListenerConfig } from './listener.js'
import type { MailConfig } from './mail.js'
import type { ProxyConfig } from './proxy.js'
import type { StateConfig } from './redis.js'
import type { SigningConfig } from './signing.js'
import type { TenantsConfig } from './tenants.js'
import type { WebhooksConfig } from './webhooks.js'

/**
 * The service's configuration, what lib/config/from-env.ts reads from the environment: each
 * concern's part is declared, read and checked in that concern's module of lib/config/.
 */
export type Config = ListenerConfig & TenantsConfig & StateConfig & SigningConfig & MailConfig & FeedbackConfig & ReputationConfig & ProxyConfig & AbuseConfig & LimitsConfig & WebhooksConfig & {
  /** OpenTelemetry tracing (lib/telemetry/config.ts); null when off (no OTLP endpoint set, or OTEL_TRACES_EXPORTER=none). */
  tracing: TracingConfig | null
}
