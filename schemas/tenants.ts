import { Type, type Static, type TString, type TUnion } from '@sinclair/typebox'
import { RATE_LIMIT_PATTERN, WINDOW_PATTERN, WORKLOAD_MAX_LENGTH, WORKLOAD_PATTERN } from './patterns.js'
import { WEBHOOK_EVENT_TYPES, WEBHOOK_SECRET_PATTERN } from './webhooks.js'

const HOST_PATTERN = '^(\\*\\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'
const ORIGIN_PATTERN = '^https?://([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(:[0-9]{1,5})?$'

export const TierSchema = Type.Object({
  allowance: Type.Integer({ minimum: 0, description: 'Live dispatches allowed per window.' }),
  window: Type.String({ pattern: WINDOW_PATTERN, description: '`<n>s`, `<n>m`, `<n>h`, `<n>d` (fixed windows aligned to the Unix epoch) or `month` (calendar month, UTC).' }),
  sandboxAllowance: Type.Integer({ minimum: 0, description: 'Sandbox dispatches allowed per window (counted apart from live).' })
}, { additionalProperties: false })

const SHARE_PATTERN = '^(100|[1-9]?[0-9])%$'

export const KeySchema = Type.Object({
  id: Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$', description: 'Key id, shown in logs instead of the key.' }),
  kind: Type.Union([Type.Literal('secret'), Type.Literal('restricted')]),
  mode: Type.Union([Type.Literal('live'), Type.Literal('test')], { description: 'test = sandbox.' }),
  sha256: Type.String({ pattern: '^[0-9a-f]{64}$', description: 'Hex SHA-256 of the whole key; the key itself is never stored.' }),
  origins: Type.Optional(Type.Array(
    Type.Union([Type.String({ pattern: HOST_PATTERN }), Type.String({ pattern: ORIGIN_PATTERN })]),
    { maxItems: 100, description: 'Restricted keys only: allowed Origin hosts (`app.example.com`, `*.example.com`) or exact origins (`http://localhost:5173`).' }
  )),
  expiresAt: Type.Optional(Type.String({ format: 'date-time', description: 'ISO 8601 instant after which the key is refused.' })),
  revoked: Type.Optional(Type.Boolean()),
  createdAt: Type.Optional(Type.String({ format: 'date-time' })),
  allowance: Type.Optional(Type.String({ pattern: SHARE_PATTERN, description: 'Restricted keys only: the share of the tenant\'s allowance (live or sandbox, as the key) this key may use per window, e.g. `25%`. Default: the tenant\'s `restrictedKeyAllowance`.' })),
  workloads: Type.Optional(Type.Array(
    Type.String({ pattern: WORKLOAD_PATTERN, maxLength: WORKLOAD_MAX_LENGTH }),
    { minItems: 1, maxItems: 100, description: 'The mesh workloads this key works for, as the sidecar names them in MESH_IDENTITY_HEADER: exact SPIFFE IDs (`spiffe://cluster.local/ns/payments/sa/api`) or Linkerd identities, or a prefix ending in `/*` for one more path segment (`spiffe://cluster.local/ns/payments/sa/*`: every service account of a namespace). From any other caller, or without a mesh identity, the key answers 403 WORKLOAD_NOT_ALLOWED. Unset: any caller.' }
  )),
  requireCaptcha: Type.Optional(Type.Boolean({ description: 'Whether dispatches with this key need a CAPTCHA token (`Captcha-Token`), whatever the tenant\'s `captcha.requireFor` says. Needs the tenant\'s `captcha`.' }))
}, { additionalProperties: false })

export const CaptchaSchema = Type.Object({
  provider: Type.Union([Type.Literal('turnstile'), Type.Literal('hcaptcha'), Type.Literal('recaptcha')], { description: 'Cloudflare Turnstile, hCaptcha or Google reCAPTCHA (v2 or v3).' }),
  secret: Type.String({ minLength: 1, maxLength: 512, description: 'The widget\'s secret key, sent to the provider\'s siteverify API only.' }),
  siteverifyUrl: Type.Optional(Type.String({ pattern: '^https?://', maxLength: 2048, description: 'Overrides the provider\'s siteverify URL (private deployments, tests). https, or http on a loopback host.' })),
  requireFor: Type.Optional(Type.Union([Type.Literal('restricted'), Type.Literal('all')], { description: 'Which keys\' dispatches need a token: restricted keys (default) or all keys.' })),
  expectedHostnames: Type.Optional(Type.Array(Type.String({ pattern: '^[a-z0-9.-]{1,253}$' }), { maxItems: 100, description: 'The token must have been solved on one of these hostnames (the provider reports it). Unset: any.' })),
  minScore: Type.Optional(Type.Number({ minimum: 0, maximum: 1, description: 'reCAPTCHA v3: the lowest score that passes.' })),
  expectedAction: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'The widget action the token must carry (Turnstile, reCAPTCHA v3).' }))
}, { additionalProperties: false, description: 'A CAPTCHA the tenant\'s dispatches must pass, checked server-side against the provider.' })

export const BrandSchema = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 100, description: 'Shown in the subject and the body of the mail.' }),
  from: Type.Optional(Type.String({ minLength: 3, maxLength: 254, description: 'Sender address for this tenant (a verified identity at the provider); default MAIL_FROM.' })),
  replyTo: Type.Optional(Type.String({ minLength: 3, maxLength: 254, description: 'Reply-To address for this tenant.' }))
}, { additionalProperties: false })

/**
 * A language tag in its canonical case (language, optional script, optional region):
 * `fr`, `pt-BR`, `zh-Hant-TW`, `es-419`. One spelling per language, so two entries cannot
 * name the same one.
 */
export const LOCALE_TAG_PATTERN = '^[a-z]{2,3}(-[A-Z][a-z]{3})?(-([A-Z]{2}|[0-9]{3}))?$'

const TemplateFileSchema = Type.Object({
  file: Type.String({ minLength: 1, maxLength: 1024, description: 'Path of a file holding the template (UTF-8) inside the tenant\'s own template folder, `<TEMPLATES_DIR>/<tenant id>/` (by default `templates/<tenant id>/` beside the tenants file). Refused: an absolute path, `..`, a symbolic link anywhere on the way, a file that is not a regular file or has more than one hard link.' })
}, { additionalProperties: false })

function templateSource (part: string, maxLength: number, description: string): TUnion<[TString, typeof TemplateFileSchema]> {
  return Type.Union([
    Type.String({ minLength: 1, maxLength, description: `The ${part} template, inline (Liquid).` }),
    TemplateFileSchema
  ], { description })
}

export const LocaleTemplatesSchema = Type.Object({
  subject: Type.Optional(templateSource('subject', 1024, 'Subject line (Liquid, not escaped, made one line). Must not use `code`.')),
  text: Type.Optional(templateSource('text part', 65536, 'Plain-text part (Liquid, not escaped). Must write `{{ code }}` exactly once.')),
  html: Type.Optional(templateSource('HTML part', 262144, 'HTML part (Liquid; every output is HTML-escaped). Must write `{{ code }}` exactly once.'))
}, { additionalProperties: false, minProperties: 1, description: 'The parts written for one language; a part left out is the service\'s own wording (en, fr, de and es only: another language needs all three).' })

const CONSTANT_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,63}$'
/** One line of text: no control characters (they could break a header or a layout). */
const CONSTANT_VALUE_PATTERN = '^[^\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029]*$'

const DOMAIN_PATTERN = '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z0-9-]{2,63}$'

export const TenantLimitsSchema = Type.Object({
  recipient: Type.Optional(Type.String({ pattern: RATE_LIMIT_PATTERN, description: 'Overrides RATE_LIMIT_RECIPIENT (`max/window`).' })),
  source: Type.Optional(Type.String({ pattern: RATE_LIMIT_PATTERN, description: 'Overrides RATE_LIMIT_SOURCE.' })),
  backend: Type.Optional(Type.String({ pattern: RATE_LIMIT_PATTERN, description: 'Overrides RATE_LIMIT_BACKEND.' })),
  key: Type.Optional(Type.String({ pattern: RATE_LIMIT_PATTERN, description: 'Overrides RATE_LIMIT_KEY.' }))
}, { additionalProperties: false })

export const RecipientPolicySchema = Type.Object({
  blockDisposable: Type.Optional(Type.Boolean({ description: 'Refuse disposable ("burner") domains (default true).' })),
  denyDomains: Type.Optional(Type.Array(Type.String({ pattern: DOMAIN_PATTERN }), { maxItems: 10000, description: 'Domains (and their subdomains) this tenant never sends to.' })),
  allowDomains: Type.Optional(Type.Array(Type.String({ pattern: DOMAIN_PATTERN }), { maxItems: 10000, description: 'Domains (and subdomains) accepted even if listed as disposable.' }))
}, { additionalProperties: false })

export const WebhookEndpointSchema = Type.Object({
  url: Type.String({ pattern: '^https?://', maxLength: 2048, description: 'Where events are POSTed: https only (http on a loopback host only with WEBHOOK_ALLOW_HTTP_LOOPBACK). No credentials or fragment.' }),
  secret: Type.String({ pattern: WEBHOOK_SECRET_PATTERN, description: 'Standard Webhooks signing secret: `whsec_` and the base64 of 24 to 64 random bytes (`echo whsec_$(openssl rand -base64 32)`).' }),
  events: Type.Array(Type.Union(WEBHOOK_EVENT_TYPES.map((type) => Type.Literal(type))), { minItems: 1, uniqueItems: true, description: 'The event types sent to this endpoint.' })
}, { additionalProperties: false })

export const ReviewAddressSchema = Type.Object({
  address: Type.String({ minLength: 3, maxLength: 254, description: 'The address an app-store reviewer or an end-to-end test signs in with: a dispatch to it sends nothing and charges nothing.' }),
  codeSha256: Type.String({ pattern: '^[0-9a-f]{64}$', description: 'Lower-case hex SHA-256 of the 6-digit code that verifies for it (`npm run keys -- review --tenant ID --address …` makes one).' }),
  expiresAt: Type.String({ format: 'date-time', description: 'Required, at most 90 days ahead when the file is loaded; past it the entry is ignored (with a warning).' })
}, { additionalProperties: false })

/** A tenant id: also part of Redis hash tags, so no braces, colons or slashes. */
export const TENANT_ID_PATTERN = '^[a-z0-9][a-z0-9_-]{0,62}$'

export const TenantSchema = Type.Object({
  id: Type.String({ pattern: TENANT_ID_PATTERN }),
  tier: Type.String({ minLength: 1, description: 'Name of a tier in `tiers`.' }),
  keys: Type.Array(KeySchema, { maxItems: 1000 }),
  brand: Type.Optional(BrandSchema),
  ttlSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86400, description: 'Overrides OTP_TTL_SECONDS for this tenant.' })),
  quota: Type.Optional(Type.Partial(TierSchema, { description: 'Overrides fields of the tier for this tenant.' })),
  limits: Type.Optional(TenantLimitsSchema),
  requireEndUserIp: Type.Optional(Type.Boolean({ description: 'Requests with this tenant\'s secret keys must send `End-User-IP` (400 END_USER_IP_REQUIRED otherwise), so that every end user gets their own per-source limits and block-list check.' })),
  restrictedKeyAllowance: Type.Optional(Type.String({ pattern: SHARE_PATTERN, description: 'Share of the allowance each restricted key may use per window unless the key sets its own `allowance` (default `10%`): abuse of a public key ends at its own 402, never at the tenant\'s.' })),
  recipients: Type.Optional(RecipientPolicySchema),
  blockedNetworks: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 100000, description: 'Addresses or CIDRs whose requests this tenant refuses (403 SOURCE_BLOCKED).' })),
  addressHashKey: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9+/]{43,}={0,2}$', maxLength: 344, description: "Base64 of at least 32 random bytes (`openssl rand -base64 32`), shared with the tenant's backend: receipts and webhook events carry HMAC-SHA256 of the recipient address under this key. Unset: a key derived from RECIPIENT_TAG_KEY, which the backend cannot compute (it can still pass the address to redeem)." })),
  webhooks: Type.Optional(Type.Array(WebhookEndpointSchema, { maxItems: 20, description: 'Endpoints that receive signed events (Standard Webhooks).' })),
  captcha: Type.Optional(CaptchaSchema),
  reviewAddresses: Type.Optional(Type.Array(ReviewAddressSchema, { maxItems: 20, description: 'Addresses whose code is fixed (stored as its SHA-256) for app-store reviewers and end-to-end tests in live mode: no mail, no charge; the code verifies as any other (once, with the lockout and the receipt). Every use is logged, counted and sent as a `review.used` webhook.' })),
  templates: Type.Optional(Type.Record(Type.String({ pattern: LOCALE_TAG_PATTERN }), LocaleTemplatesSchema, {
    additionalProperties: false,
    maxProperties: 50,
    description: 'The tenant\'s own message wording, per language (`fr`, `pt-BR`…) and part, in Liquid. Variables: `code`, `minutes`, `brand`, `locale`, `requestedAt`, `constants.<name>`. Checked when the file is loaded: a template that breaks a rule refuses its tenant (the other tenants are served).'
  })),
  constants: Type.Optional(Type.Record(Type.String({ pattern: CONSTANT_NAME_PATTERN }), Type.String({ maxLength: 500, pattern: CONSTANT_VALUE_PATTERN }), {
    additionalProperties: false,
    maxProperties: 50,
    description: 'Short texts the templates read as `constants.<name>` (a support URL, a legal line…): one line each, escaped in HTML like every value.'
  })),
  defaultLocale: Type.Optional(Type.String({ pattern: LOCALE_TAG_PATTERN, description: 'The language of the mail when neither the request\'s `locale` nor Accept-Language matches one the tenant has (default `en`): a built-in language (en, fr, de, es) or one of `templates`.' }))
}, { additionalProperties: false })

export const TenantsFileSchema = Type.Object({
  $schema: Type.Optional(Type.String()),
  tiers: Type.Record(Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$' }), TierSchema),
  tenants: Type.Array(TenantSchema)
}, {
  $id: 'https://email-otp.dev/schemas/tenants.schema.json',
  title: 'email-otp tenants file',
  additionalProperties: false
})

export type TierEntry = Static<typeof TierSchema>
export type KeyEntry = Static<typeof KeySchema>
export type TenantEntry = Static<typeof TenantSchema>
export type TenantsFile = Static<typeof TenantsFileSchema>
export type WebhookEndpointEntry = Static<typeof WebhookEndpointSchema>
export type ReviewAddressEntry = Static<typeof ReviewAddressSchema>
