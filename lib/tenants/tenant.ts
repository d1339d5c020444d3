import type { KeyObject } from 'node:crypto'
import type { WebhookEventType } from '../../schemas/webhooks.js'
import type { CaptchaSettings } from '../captcha/siteverify.js'
import type { VelocityLimits } from '../limits/rate-limit.js'
import type { QuotaWindow } from '../limits/window.js'
import type { TenantTemplates } from '../mail/templating/tenant-templates.js'
import type { IpRangeSet } from '../net/ip-ranges.js'
import type { RecipientPolicy } from '../recipients/policy.js'
import type { KeyKind, KeyMode } from '../keys/api-keys.js'

export interface Allowance {
  limit: number
  window: QuotaWindow
}

/** A tenant's tier with its per-tenant overrides applied, windows parsed once. */
export interface Tier {
  name: string
  live: Allowance
  test: Allowance
}

export interface Tenant {
  id: string
  tier: Tier
  brandName: string
  /** Sender and Reply-To of this tenant's mail; null means MAIL_FROM and none. */
  from: string | null
  replyTo: string | null
  ttlSeconds: number | null
  /** Velocity limits this tenant overrides; the rest come from the configuration. */
  limits: Partial<VelocityLimits>
  recipientPolicy: RecipientPolicy
  /** Networks this tenant refuses requests from, or null. */
  blockedNetworks: IpRangeSet | null
  /** Its secret keys must say which end user they call for (End-User-IP). */
  requireEndUserIp: boolean
  /** The key receipts and webhook events hash the recipient address under; null: a derived one. */
  addressHashKey: KeyObject | null
  webhooks: readonly WebhookEndpoint[]
  /** The CAPTCHA its dispatches must pass, or null. */
  captcha: CaptchaSettings | null
  /** Its message wording (its own templates, the built-in wording elsewhere) and languages. */
  templates: TenantTemplates
  /** Review addresses (lower-cased validated address → code hash and expiry); empty for most. */
  reviewAddresses: ReadonlyMap<string, ReviewAddress>
}

/** A review address's fixed code, as its SHA-256, and when it stops working. */
export interface ReviewAddress {
  codeSha256: string
  expiresAtMs: number
}

/** Where a tenant's events go: a URL is one endpoint (its identity in the delivery queue). */
export interface WebhookEndpoint {
  url: string
  /** `whsec_…`, as the Standard Webhooks libraries take it. */
  secret: string
  events: ReadonlySet<WebhookEventType>
}

export interface TenantKey {
  id: string
  kind: KeyKind
  mode: KeyMode
  tenant: Tenant
  expiresAtMs: number | null
  revoked: boolean
  /** Null for secret keys; for restricted keys, the Origin test. */
  allowsOrigin: ((origin: string) => boolean) | null
  /** Restricted keys: the fraction of the tenant's allowance the key may use; null for secret keys. */
  allowanceShare: number | null
  /** Its dispatches need a CAPTCHA token (the tenant's `captcha`). */
  captchaRequired: boolean
  /** Null when any caller may use the key; else whether a workload identity may (`workloads`). */
  allowsWorkload: ((identity: string) => boolean) | null
}
