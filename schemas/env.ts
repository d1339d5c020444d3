import { Type, type Static } from '@sinclair/typebox'

const PositiveInt = (defaultValue: number, minimum: number, maximum: number, description: string) =>
  Type.Integer({ default: defaultValue, minimum, maximum, description })

/**
 * The process environment the service reads, and nothing else. Every variable is listed in
 * the README's configuration table with the default and description given here.
 */
export const EnvSchema = Type.Object({
  HOST: Type.String({ default: '127.0.0.1', minLength: 1, description: 'Address to listen on (0.0.0.0 in containers).' }),
  PORT: PositiveInt(3000, 0, 65535, 'TCP port to listen on.'),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info', description: 'pino log level.' }
  ),
  TENANTS_FILE: Type.Optional(Type.String({ minLength: 1, description: 'Path of the tenants file (JSON). Unset: the built-in demo tenant with the documented sandbox key.' })),
  REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://', description: 'redis:// or rediss:// URL. Set: tokens and counters live in Redis, shared by every instance. Unset: in memory, one instance.' })),
  REDIS_COMMAND_TIMEOUT_MS: PositiveInt(500, 50, 10000, 'A Redis command not answered within this time fails the request with 503.'),
  OTP_HMAC_KEYS: Type.Optional(Type.String({ minLength: 1, description: 'Comma-separated `id:secret` pairs (secret: base64 of at least 32 bytes). The first signs new codes; all verify. Required with REDIS_URL.' })),
  OTP_TTL_SECONDS: PositiveInt(600, 1, 86400, 'Lifetime of a code in seconds, unless the tenant overrides it.'),
  MEMORY_STORE_MAX_TOKENS: PositiveInt(1_000_000, 1, 50_000_000, 'Cap on live codes in the in-memory store; past it, dispatch answers 503.'),
  MAIL_TRANSPORT: Type.Union([Type.Literal('log'), Type.Literal('ses'), Type.Literal('smtp')], { default: 'log', description: 'How live mail leaves: log (prints it), ses or smtp.' }),
  MAIL_TIMEOUT_MS: PositiveInt(5000, 100, 60000, 'Upper bound for handing one message to the provider, retries included; past it, dispatch answers 502.'),
  SMTP_URL: Type.Optional(Type.String({ pattern: '^smtps?://', description: 'smtp:// (STARTTLS required) or smtps:// (implicit TLS) URL with credentials, for MAIL_TRANSPORT=smtp. `?tls=off` allows plaintext, for a relay on localhost only.' })),
  AWS_REGION: Type.Optional(Type.String({ pattern: '^[a-z]{2}(-[a-z]+)+-[0-9]+$', description: 'SES region, for MAIL_TRANSPORT=ses. Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID…, profiles, instance roles).' })),
  AWS_ENDPOINT_URL_SESV2: Type.Optional(Type.String({ pattern: '^https?://', description: 'Overrides the SES endpoint (a VPC endpoint, or a local emulator).' })),
  SES_CONFIGURATION_SET: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$', description: 'SES configuration set for event publishing.' })),
  MAIL_FROM: Type.Optional(Type.String({ minLength: 3, description: 'Sender address (or "Name <address>"). Required for ses and smtp.' })),
  BODY_LIMIT_BYTES: PositiveInt(4096, 256, 1_048_576, 'Largest accepted request body; larger answers 413.'),
  TRUST_PROXY: Type.Optional(Type.String({ description: 'Comma-separated CIDRs of proxies whose X-Forwarded-For is trusted. Unset: trust none.' })),
  SHUTDOWN_GRACE_MS: PositiveInt(10000, 0, 120000, 'On SIGTERM, time allowed for in-flight requests before the process exits.')
})

export type Env = Static<typeof EnvSchema>

/** Variables whose values must never be echoed in an error line. */
export const secretEnvVariables: ReadonlySet<string> = new Set(['OTP_HMAC_KEYS', 'REDIS_URL', 'SMTP_URL'])
