import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Value } from '@sinclair/typebox/value'
import ipaddr from 'ipaddr.js'
import { EnvSchema, secretEnvVariables, type Env } from '../../schemas/env.js'
import { ARN_LIST_PATTERN, MAIL_TRANSPORT_PATTERN, RATE_LIMIT_OR_OFF_PATTERN, RATE_LIMIT_PATTERN } from '../../schemas/patterns.js'
import type { LockoutPolicy } from '../limits/lockout-policy.js'
import { parseDuration, type DurationUnit } from '../duration.js'
import { parseRateLimit, type RateLimit } from '../limits/rate-limit.js'
import type { MacKey } from '../keys/mac-key.js'
import type { MailTransportName } from '../mail/delivery/mailer.js'
import { TemplateFolders, blockListFiles, templatesRootProblem } from '../mail/templating/template-files.js'
import { parseReceiptSigningKeys, type ReceiptKeyMaterial } from '../receipts/signing-keys.js'
import { validateEmail } from '../recipients/address.js'
import type { RedisAccess, RedisNode, RedisTopology } from '../state/index.js'
import { tracingConfig } from '../telemetry/config.js'
import { gatewayIdentityProblem, type MeshGateways } from '../net/workload-identity.js'
import type { Config } from './types.js'

/** A configuration problem, reported as one line naming the variable. */
export class ConfigError extends Error {
  readonly variable: string
  constructor (variable: string, problem: string) {
    super(`Invalid configuration: ${variable} ${problem}`)
    this.name = 'ConfigError'
    this.variable = variable
  }
}

const DEFAULT_LOG_SENDER = 'Email OTP <no-reply@localhost>'

/** Validates the environment once; throws ConfigError naming the first bad variable. */
export function parseConfig (source: Readonly<Record<string, string | undefined>>): Config {
  const valid = validEnv(source)

  const redis = redisTopology(valid)
  const hmacKeys = valid.OTP_HMAC_KEYS === undefined ? null : signingFirst('OTP_HMAC_SIGNING_KEY', 'OTP_HMAC_KEYS', parseMacKeys(valid.OTP_HMAC_KEYS), (key) => key.id, valid.OTP_HMAC_SIGNING_KEY)
  if (hmacKeys === null && valid.OTP_HMAC_SIGNING_KEY !== undefined) throw new ConfigError('OTP_HMAC_SIGNING_KEY', 'is only used with OTP_HMAC_KEYS')
  if (hmacKeys === null && redis !== null) {
    throw new ConfigError('OTP_HMAC_KEYS', `is required when ${redis.variable} is set: every instance must sign codes with the same key`)
  }
  const recipientTagKey = recipientTagKeyOf(valid, hmacKeys)
  if (redis === null && recipientTagKey.accept !== null) {
    throw new ConfigError('RECIPIENT_TAG_KEY_ACCEPT', 'is only used with Redis: the embedded default keeps nothing across restarts for a key to be compared with')
  }
  let receiptSigningKeys: ReceiptKeyMaterial[] | null = null
  if (valid.RECEIPT_SIGNING_KEYS !== undefined) {
    try {
      receiptSigningKeys = parseReceiptSigningKeys(valid.RECEIPT_SIGNING_KEYS)
    } catch (error) {
      throw new ConfigError('RECEIPT_SIGNING_KEYS', (error as Error).message)
    }
    receiptSigningKeys = signingFirst('RECEIPT_SIGNING_KEY', 'RECEIPT_SIGNING_KEYS', receiptSigningKeys, (key) => key.kid, valid.RECEIPT_SIGNING_KEY)
  } else if (valid.RECEIPT_SIGNING_KEY !== undefined) {
    throw new ConfigError('RECEIPT_SIGNING_KEY', 'is only used with RECEIPT_SIGNING_KEYS (derived receipt keys follow OTP_HMAC_SIGNING_KEY)')
  }
  const mailTransports = valid.MAIL_TRANSPORT.split(',') as MailTransportName[]
  if (new Set(mailTransports).size !== mailTransports.length) {
    throw new ConfigError('MAIL_TRANSPORT', `names a provider twice (${valid.MAIL_TRANSPORT})`)
  }
  if (valid.MAIL_TRANSPORT !== 'log' && valid.MAIL_FROM === undefined) {
    throw new ConfigError('MAIL_FROM', `is required when MAIL_TRANSPORT=${valid.MAIL_TRANSPORT}`)
  }
  if (valid.MAIL_FROM !== undefined && !isSender(valid.MAIL_FROM)) {
    throw new ConfigError('MAIL_FROM', `must be an email address, or "Name <address>" (got ${JSON.stringify(valid.MAIL_FROM)})`)
  }
  if (mailTransports.includes('smtp') && valid.SMTP_URL === undefined) {
    throw new ConfigError('SMTP_URL', `is required when MAIL_TRANSPORT=${valid.MAIL_TRANSPORT}`)
  }
  if (mailTransports.includes('ses') && valid.AWS_REGION === undefined) {
    throw new ConfigError('AWS_REGION', `is required when MAIL_TRANSPORT=${valid.MAIL_TRANSPORT}`)
  }
  let certUrlPattern: RegExp
  try {
    // Matched against the whole URL, anchors or not: `sns\.example` must not admit
    // https://evil.example/sns.example.pem.
    certUrlPattern = new RegExp(`^(?:${valid.SNS_SIGNING_CERT_URL_PATTERN})$`)
  } catch {
    throw new ConfigError('SNS_SIGNING_CERT_URL_PATTERN', 'is not a valid regular expression')
  }
  if (valid.METRICS_HOST !== undefined && valid.METRICS_PORT === undefined) {
    throw new ConfigError('METRICS_HOST', 'is only used with METRICS_PORT')
  }
  if (valid.METRICS_PORT !== undefined && valid.METRICS_PORT !== 0 && valid.METRICS_PORT === valid.PORT) {
    throw new ConfigError('METRICS_PORT', `must differ from PORT (${valid.PORT}): the internal listener is a listener of its own`)
  }

  const trustProxy = parseCidrList('TRUST_PROXY', valid.TRUST_PROXY)
  if (valid.MESH_IDENTITY_HEADER !== undefined && trustProxy.length === 0) {
    throw new ConfigError('MESH_IDENTITY_HEADER', 'needs TRUST_PROXY: the identity is read only from the address the sidecar connects from (127.0.0.6 behind Istio)')
  }
  const meshGateways = meshGatewaysOf(valid)

  const blocklists = {
    ipSources: (valid.IP_BLOCKLISTS ?? '').split(',').map((entry) => entry.trim()).filter((entry) => entry !== ''),
    torSource: valid.TOR_EXIT_LIST ?? null,
    refreshMs: durationMs(valid, 'BLOCKLIST_REFRESH_SECONDS')
  }
  const templatesDir = templatesFolder(valid, blocklists)

  const lockout: LockoutPolicy = {
    threshold: valid.LOCKOUT_THRESHOLD,
    baseMs: durationMs(valid, 'LOCKOUT_DURATION'),
    maxMs: durationMs(valid, 'LOCKOUT_MAX_DURATION'),
    resetAfterMs: durationMs(valid, 'LOCKOUT_RESET_AFTER')
  }
  if (lockout.maxMs < lockout.baseMs) throw new ConfigError('LOCKOUT_MAX_DURATION', `must be at least LOCKOUT_DURATION (${valid.LOCKOUT_DURATION})`)

  return {
    host: valid.HOST,
    port: valid.PORT,
    logLevel: valid.LOG_LEVEL,
    tenantsFile: valid.TENANTS_FILE ?? null,
    templatesDir,
    tenantsFileMaxBytes: valid.TENANTS_FILE_MAX_BYTES,
    redisUrl: valid.REDIS_URL ?? null,
    redis: redis?.topology ?? null,
    ...redisSettings(valid, redis?.variable ?? null),
    hmacKeys: hmacKeys ?? [{ id: 'ephemeral', secret: randomBytes(32) }],
    hmacKeyGenerated: hmacKeys === null,
    recipientTagKey,
    otpTtlSeconds: durationSeconds(valid, 'OTP_TTL_SECONDS'),
    memoryStoreMaxTokens: valid.MEMORY_STORE_MAX_TOKENS,
    mailTransports,
    suppressionMs: valid.SUPPRESSION_DAYS * 86_400_000,
    sesFeedback: { topicArns: new Set((valid.SES_FEEDBACK_TOPIC_ARNS ?? '').split(',').filter((arn) => arn !== '')), certUrlPattern },
    mailBreaker: { failures: valid.MAIL_BREAKER_FAILURES, openMs: durationMs(valid, 'MAIL_BREAKER_OPEN_SECONDS') },
    mailFrom: valid.MAIL_FROM ?? DEFAULT_LOG_SENDER,
    mailTimeoutMs: durationMs(valid, 'MAIL_TIMEOUT_MS'),
    smtpUrl: valid.SMTP_URL ?? null,
    ses: { region: valid.AWS_REGION ?? null, endpoint: valid.AWS_ENDPOINT_URL_SESV2 ?? null, configurationSet: valid.SES_CONFIGURATION_SET ?? null },
    bodyLimitBytes: valid.BODY_LIMIT_BYTES,
    trustProxy,
    meshIdentityHeader: valid.MESH_IDENTITY_HEADER ?? null,
    meshGateways,
    shutdownGraceMs: durationMs(valid, 'SHUTDOWN_GRACE_MS'),
    shutdownDrainMs: durationMs(valid, 'SHUTDOWN_DRAIN_MS'),
    blocklists,
    ipv6BucketPrefix: valid.IPV6_BUCKET_PREFIX,
    rateLimits: {
      source: rateLimit('RATE_LIMIT_SOURCE', valid.RATE_LIMIT_SOURCE),
      backend: rateLimit('RATE_LIMIT_BACKEND', valid.RATE_LIMIT_BACKEND),
      recipient: rateLimit('RATE_LIMIT_RECIPIENT', valid.RATE_LIMIT_RECIPIENT),
      key: rateLimit('RATE_LIMIT_KEY', valid.RATE_LIMIT_KEY)
    },
    mailboxLimit: valid.RATE_LIMIT_MAILBOX === 'off' ? null : rateLimit('RATE_LIMIT_MAILBOX', valid.RATE_LIMIT_MAILBOX),
    routeLimits: {
      account: rateLimit('RATE_LIMIT_ACCOUNT', valid.RATE_LIMIT_ACCOUNT),
      preview: rateLimit('RATE_LIMIT_PREVIEW', valid.RATE_LIMIT_PREVIEW),
      public: rateLimit('RATE_LIMIT_PUBLIC', valid.RATE_LIMIT_PUBLIC)
    },
    lockout,
    metricsToken: valid.METRICS_TOKEN ?? null,
    metricsListener: valid.METRICS_PORT === undefined ? null : { host: valid.METRICS_HOST ?? '127.0.0.1', port: valid.METRICS_PORT },
    requestTimeoutMs: durationMs(valid, 'REQUEST_TIMEOUT_MS'),
    captchaTimeoutMs: durationMs(valid, 'CAPTCHA_TIMEOUT_MS'),
    keepAliveTimeoutMs: durationMs(valid, 'KEEP_ALIVE_TIMEOUT_MS'),
    maxConnectionsPerSource: valid.MAX_CONNECTIONS_PER_SOURCE,
    refusalPace: valid.REFUSAL_PACE_PER_SECOND === 0 ? null : { perSecond: valid.REFUSAL_PACE_PER_SECOND, burst: valid.REFUSAL_PACE_BURST, maxDelayMs: durationMs(valid, 'REFUSAL_PACE_MAX_DELAY_MS') },
    receipts: { signingKeys: receiptSigningKeys, issuer: valid.RECEIPT_ISSUER, ttlSeconds: durationSeconds(valid, 'RECEIPT_TTL_SECONDS') },
    webhooks: {
      timeoutMs: durationMs(valid, 'WEBHOOK_TIMEOUT_MS'),
      concurrencyPerEndpoint: valid.WEBHOOK_CONCURRENCY_PER_ENDPOINT,
      maxInFlightPerTenant: valid.WEBHOOK_MAX_IN_FLIGHT_PER_TENANT,
      maxQueuedPerTenant: valid.WEBHOOK_MAX_QUEUED_PER_TENANT,
      retry: {
        baseMs: durationMs(valid, 'WEBHOOK_RETRY_BASE_MS'),
        maxDelayMs: Math.max(durationMs(valid, 'WEBHOOK_RETRY_BASE_MS'), durationMs(valid, 'WEBHOOK_RETRY_MAX_DELAY_MS')),
        forMs: durationMs(valid, 'WEBHOOK_RETRY_FOR')
      },
      allowHttpLoopback: valid.WEBHOOK_ALLOW_HTTP_LOOPBACK === 'true',
      allowedNetworks: parseCidrList('WEBHOOK_ALLOWED_NETWORKS', valid.WEBHOOK_ALLOWED_NETWORKS)
    },
    tracing: tracingConfig(valid, (variable, problem) => new ConfigError(variable, problem))
  }
}

/**
 * MESH_GATEWAY_IDENTITIES and MESH_GATEWAY_TRUSTED_HOPS. Required with a mesh identity, `none`
 * included: left unset, an ingress gateway would be counted as one workload, every end user
 * behind it in one bucket, and nothing would say so until its users were refused.
 */
function meshGatewaysOf (env: Env): MeshGateways | null {
  const named = env.MESH_GATEWAY_IDENTITIES
  if (env.MESH_IDENTITY_HEADER === undefined) {
    if (named !== undefined) throw new ConfigError('MESH_GATEWAY_IDENTITIES', 'is only used with MESH_IDENTITY_HEADER')
  } else if (named === undefined) {
    throw new ConfigError('MESH_GATEWAY_IDENTITIES', 'is required with MESH_IDENTITY_HEADER: the identities of the gateways that forward end users\' requests (each end user is then counted, not the gateway), or none when only internal workloads call the service')
  }
  const identities = (named ?? 'none').split(',').map((entry) => entry.trim()).filter((entry) => entry !== '')
  if (identities.length === 0) throw new ConfigError('MESH_GATEWAY_IDENTITIES', 'names no identity (none: no gateway forwards to the service)')
  if (identities.length === 1 && identities[0] === 'none') {
    if (env.MESH_GATEWAY_TRUSTED_HOPS !== 0) throw new ConfigError('MESH_GATEWAY_TRUSTED_HOPS', 'is only used with MESH_GATEWAY_IDENTITIES (the proxies in front of a gateway)')
    return null
  }
  for (const identity of identities) {
    if (identity === 'none') throw new ConfigError('MESH_GATEWAY_IDENTITIES', 'lists none beside identities: none stands alone')
    const problem = gatewayIdentityProblem(env.MESH_IDENTITY_HEADER ?? 'x-forwarded-client-cert', identity)
    if (problem !== null) throw new ConfigError('MESH_GATEWAY_IDENTITIES', `has an entry ${JSON.stringify(identity.slice(0, 200))} that ${problem}`)
  }
  return { identities, trustedHops: env.MESH_GATEWAY_TRUSTED_HOPS }
}

/**
 * TEMPLATES_DIR, or `templates/` beside the tenants file: a folder that holds tenants'
 * template files and nothing else the service reads.
 */
function templatesFolder (env: Env, blocklists: { ipSources: string[], torSource: string | null }): string | null {
  if (env.TENANTS_FILE === undefined) {
    if (env.TEMPLATES_DIR !== undefined) throw new ConfigError('TEMPLATES_DIR', 'is only used with TENANTS_FILE')
    if (env.TENANTS_FILE_MAX_BYTES !== EnvSchema.properties.TENANTS_FILE_MAX_BYTES.default) throw new ConfigError('TENANTS_FILE_MAX_BYTES', 'is only used with TENANTS_FILE')
    return null
  }
  const root = env.TEMPLATES_DIR ?? TemplateFolders.besideTenantsFile(env.TENANTS_FILE)
  const problem = templatesRootProblem(root, { tenantsFile: env.TENANTS_FILE, others: blockListFiles(blocklists.ipSources, blocklists.torSource) })
  if (problem !== null) throw new ConfigError('TEMPLATES_DIR', `${env.TEMPLATES_DIR === undefined ? '(unset: templates/ beside TENANTS_FILE) ' : ''}${problem}`)
  return root
}

const REDIS_TOPOLOGY_VARIABLES = ['REDIS_URL', 'REDIS_SENTINELS', 'REDIS_CLUSTER_NODES'] as const

/**
 * What a tool working on the service's Redis needs (the webhooks CLI): the topology and the
 * webhook queue's per-tenant cap, checked as for the service, and nothing the tool does not use
 * (no OTP_HMAC_KEYS: it signs nothing).
 */
export function parseRedisToolConfig (source: Readonly<Record<string, string | undefined>>): { redis: RedisTopology | null, redisVariable: string | null, webhooks: { maxQueuedPerTenant: number } } {
  const valid = validEnv(source)
  const redis = redisTopology(valid)
  return { redis: redis?.topology ?? null, redisVariable: redis?.variable ?? null, webhooks: { maxQueuedPerTenant: valid.WEBHOOK_MAX_QUEUED_PER_TENANT } }
}

/** Reads a secret's file (`<NAME>_FILE`) once at start; the path is named, never the content. */
function readSecretFile (variable: string, path: string): string {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (error) {
    throw new ConfigError(`${variable}_FILE`, `cannot be read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message} (${path})`)
  }
  const value = text.trim()
  if (value === '') throw new ConfigError(`${variable}_FILE`, `names an empty file (${path})`)
  return value
}

/**
 * The environment with every secret given as a file (`<NAME>_FILE`) read into its variable.
 * Both set is an error: which one wins would depend on who reads the manifest.
 */
function withSecretFiles (source: Readonly<Record<string, string | undefined>>): Readonly<Record<string, string | undefined>> {
  const set = (value: string | undefined): value is string => value !== undefined && value.trim() !== ''
  let resolved: Record<string, string | undefined> | null = null
  for (const variable of secretEnvVariables) {
    const path = source[`${variable}_FILE`]
    if (!set(path)) continue
    if (set(source[variable])) throw new ConfigError(`${variable}_FILE`, `cannot be combined with ${variable}: set one of them`)
    resolved ??= { ...source }
    resolved[variable] = readSecretFile(variable, path.trim())
  }
  return resolved ?? source
}

/** The environment against its schema, defaults applied; throws ConfigError naming the first bad variable. */
const DECIMAL_INTEGER = /^-?[0-9]{1,15}$/

function validEnv (environment: Readonly<Record<string, string | undefined>>): Env {
  const source = withSecretFiles(environment)
  const raw: Record<string, unknown> = {}
  for (const name of Object.keys(EnvSchema.properties)) {
    const value = source[name]
    // An empty variable (common in container manifests) means "not set".
    if (value !== undefined && value.trim() !== '') raw[name] = value.trim()
  }
  for (const [name, value] of Object.entries(raw)) {
    // TypeBox's conversion reads "1.5", "1e1" and "0x1" as 1: a number is written in digits.
    const schema = EnvSchema.properties[name as keyof typeof EnvSchema.properties] as { type?: unknown }
    if (schema.type === 'integer' && !DECIMAL_INTEGER.test(value as string)) {
      throw new ConfigError(name, `${describe(schema as Parameters<typeof describe>[0])} (got ${JSON.stringify(value)})`)
    }
  }
  const env = Value.Convert(EnvSchema, Value.Default(EnvSchema, raw))
  const firstError = Value.Errors(EnvSchema, env).First()
  if (firstError !== undefined) {
    const variable = firstError.path.replace(/^\//, '') || 'environment'
    const shown = secretEnvVariables.has(variable) ? '' : ` (got ${JSON.stringify(raw[variable])})`
    throw new ConfigError(variable, `${describe(firstError.schema as Parameters<typeof describe>[0])}${shown}`)
  }
  return env as Env
}

/** The one Redis topology configured, and the variable that chose it; null for none. */
function redisTopology (env: Env): { topology: RedisTopology, variable: string } | null {
  const [first, second] = REDIS_TOPOLOGY_VARIABLES.filter((name) => env[name] !== undefined)
  if (first !== undefined && second !== undefined) {
    throw new ConfigError(second, `cannot be combined with ${first}: set exactly one of ${REDIS_TOPOLOGY_VARIABLES.join(', ')}`)
  }
  if (env.REDIS_SENTINEL_NAME !== undefined && env.REDIS_SENTINELS === undefined) {
    throw new ConfigError('REDIS_SENTINEL_NAME', 'is only used with REDIS_SENTINELS')
  }
  const access: RedisAccess = { username: env.REDIS_USERNAME ?? null, password: env.REDIS_PASSWORD ?? null, tls: env.REDIS_TLS === 'true' }
  if (env.REDIS_SENTINELS === undefined && env.REDIS_CLUSTER_NODES === undefined) {
    // A URL names its own credentials and TLS (rediss://); two sources could disagree.
    for (const [name, set] of [['REDIS_USERNAME', access.username !== null], ['REDIS_PASSWORD', access.password !== null], ['REDIS_TLS', access.tls]] as const) {
      if (set) throw new ConfigError(name, 'is only used with REDIS_SENTINELS or REDIS_CLUSTER_NODES (REDIS_URL carries its own credentials and rediss://)')
    }
  }
  if (access.username !== null && access.password === null) {
    throw new ConfigError('REDIS_PASSWORD', 'is required when REDIS_USERNAME is set')
  }
  if (env.REDIS_URL !== undefined) return { variable: 'REDIS_URL', topology: { kind: 'single', url: env.REDIS_URL } }
  if (env.REDIS_SENTINELS !== undefined) {
    if (env.REDIS_SENTINEL_NAME === undefined) throw new ConfigError('REDIS_SENTINEL_NAME', 'is required when REDIS_SENTINELS is set')
    const sentinels = parseRedisNodes('REDIS_SENTINELS', env.REDIS_SENTINELS)
    return { variable: 'REDIS_SENTINELS', topology: { kind: 'sentinel', sentinels, name: env.REDIS_SENTINEL_NAME, ...access } }
  }
  if (env.REDIS_CLUSTER_NODES !== undefined) {
    return { variable: 'REDIS_CLUSTER_NODES', topology: { kind: 'cluster', nodes: parseRedisNodes('REDIS_CLUSTER_NODES', env.REDIS_CLUSTER_NODES), ...access } }
  }
  return null
}

/**
 * The Redis client's timeout and acknowledgements, each refused where it would do nothing
 * (`redisVariable`: the variable that chose a topology, null for the embedded default): a
 * setting without effect would let an operator count on a guarantee the service does not give.
 * A variable left at its default, as .env.example spells them all, chooses nothing.
 */
function redisSettings (env: Env, redisVariable: string | null): Pick<Config, 'redisCommandTimeoutMs' | 'redisReplicaAcks'> {
  const commandTimeoutMs = durationMs(env, 'REDIS_COMMAND_TIMEOUT_MS')
  const replicaAcks = { count: env.REDIS_REPLICA_ACKS, timeoutMs: durationMs(env, 'REDIS_REPLICA_ACK_TIMEOUT_MS') }
  const topologies = REDIS_TOPOLOGY_VARIABLES.join(', ')
  if (redisVariable === null) {
    if (replicaAcks.count > 0) throw new ConfigError('REDIS_REPLICA_ACKS', `is only used with one of ${topologies}: the embedded default has no replicas`)
    if (commandTimeoutMs !== defaultDurationMs('REDIS_COMMAND_TIMEOUT_MS')) throw new ConfigError('REDIS_COMMAND_TIMEOUT_MS', `is only used with one of ${topologies}`)
  } else if (env.MEMORY_STORE_MAX_TOKENS !== EnvSchema.properties.MEMORY_STORE_MAX_TOKENS.default) {
    throw new ConfigError('MEMORY_STORE_MAX_TOKENS', `is only used on the embedded default, not with ${redisVariable} (Redis holds the codes)`)
  }
  if (replicaAcks.count === 0 && replicaAcks.timeoutMs !== defaultDurationMs('REDIS_REPLICA_ACK_TIMEOUT_MS')) {
    throw new ConfigError('REDIS_REPLICA_ACK_TIMEOUT_MS', 'is only used with REDIS_REPLICA_ACKS of 1 or more')
  }
  if (replicaAcks.count > 0 && replicaAcks.timeoutMs >= commandTimeoutMs) {
    // WAIT holds its connection until it returns: every command behind it would time out first.
    throw new ConfigError('REDIS_REPLICA_ACK_TIMEOUT_MS', `must be below REDIS_COMMAND_TIMEOUT_MS (${commandTimeoutMs} ms), or the commands behind a WAIT time out before it returns (got ${replicaAcks.timeoutMs} ms)`)
  }
  return { redisCommandTimeoutMs: commandTimeoutMs, redisReplicaAcks: replicaAcks }
}

/** `host:port,host:port`; an IPv6 host goes in brackets, `[::1]:26379`. */
function parseRedisNodes (variable: string, value: string): RedisNode[] {
  const nodes: RedisNode[] = []
  for (const entry of value.split(',').map((item) => item.trim()).filter((item) => item !== '')) {
    const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):([0-9]{1,5})$/.exec(entry)
    const port = Number(match?.[3])
    const host = match?.[1] ?? match?.[2]
    if (host === undefined || !(port >= 1 && port <= 65535)) {
      throw new ConfigError(variable, `must be comma-separated host:port pairs (got ${JSON.stringify(entry)})`)
    }
    nodes.push({ host, port })
  }
  if (nodes.length === 0) throw new ConfigError(variable, 'must name at least one host:port')
  return nodes
}

type DurationVariable = { [Name in keyof Env]-?: Env[Name] extends string ? Name : never }[keyof Env]

interface DurationSchema { durationUnit: DurationUnit | null, durationMinimum: string, durationMaximum: string }

const isDurationSchema = (schema: object): schema is DurationSchema => 'durationMinimum' in schema

function durationRule (schema: DurationSchema): string {
  const plain = schema.durationUnit === null ? '' : ` (a plain number is ${schema.durationUnit === 'ms' ? 'milliseconds' : 'seconds'})`
  return `must be a duration from ${schema.durationMinimum} to ${schema.durationMaximum}, such as 500ms, 30s, 15m, 24h or 30d${plain}`
}

/** A duration variable in milliseconds, within the bounds its schema names. */
function durationMs (env: Env, variable: DurationVariable): number {
  const schema = EnvSchema.properties[variable] as unknown as DurationSchema
  const spec = env[variable]
  const ms = parseDuration(spec, schema.durationUnit)
  const minimum = parseDuration(schema.durationMinimum, null) ?? 0
  const maximum = parseDuration(schema.durationMaximum, null) ?? 0
  if (ms === null || ms < minimum || ms > maximum) throw new ConfigError(variable, `${durationRule(schema)} (got ${JSON.stringify(spec)})`)
  return ms
}

/** A duration variable's default, in milliseconds. */
function defaultDurationMs (variable: DurationVariable): number {
  const schema = EnvSchema.properties[variable] as unknown as DurationSchema & { default: string }
  return parseDuration(schema.default, schema.durationUnit) ?? 0
}

/** A duration variable the service counts in whole seconds. */
function durationSeconds (env: Env, variable: DurationVariable): number {
  const ms = durationMs(env, variable)
  if (ms % 1000 !== 0) throw new ConfigError(variable, `must be whole seconds (got ${JSON.stringify(env[variable])})`)
  return ms / 1000
}

function rateLimit (variable: string, spec: string): RateLimit {
  const parsed = parseRateLimit(spec)
  if (parsed === null) throw new ConfigError(variable, `must be max/window such as 5/15m (got ${JSON.stringify(spec)})`)
  return parsed
}

/** The rule behind each pattern of the environment schema, in words. */
const PATTERN_RULES: Readonly<Record<string, string>> = {
  '^rediss?://': 'must be a redis:// or rediss:// URL',
  '^smtps?://': 'must be an smtp:// or smtps:// URL',
  '^https?://': 'must be an http:// or https:// URL',
  '^\\S+$': 'must be one word, without spaces',
  '^[a-z]{2}(-[a-z]+)+-[0-9]+$': 'must be an AWS region such as eu-west-1',
  '^[A-Za-z0-9_-]{1,64}$': 'must be 1 to 64 letters, digits, _ or -',
  '^[A-Za-z0-9_-]{1,16}$': 'must be 1 to 16 letters, digits, _ or -',
  '^[A-Za-z0-9_-]{16}$': 'must be the 16-character fingerprint the refusal line printed',
  '^[\\x21-\\x7e]{1,200}$': 'must be 1 to 200 printable ASCII characters, without spaces',
  [RATE_LIMIT_PATTERN]: 'must be max/window: a whole number, a slash, then a window such as 1m, 15m, 1h or 1d (e.g. 30/1m)',
  [RATE_LIMIT_OR_OFF_PATTERN]: 'must be max/window (e.g. 15/15m) or off',
  '^(0(\\.[0-9]+)?|1(\\.0+)?)$': 'must be a ratio from 0 to 1 (e.g. 0.01)',
  [ARN_LIST_PATTERN]: 'must be one or more ARNs (arn:aws:sns:…), comma-separated',
  [MAIL_TRANSPORT_PATTERN]: 'must be one of log, ses, smtp, or two providers in the order to try them (ses,smtp or smtp,ses)'
}

function describe (schema: { type?: unknown, minimum?: number, maximum?: number, minLength?: number, pattern?: string, anyOf?: Array<{ const?: unknown }> }): string {
  if (isDurationSchema(schema)) return durationRule(schema)
  if (Array.isArray(schema.anyOf)) return `must be one of ${schema.anyOf.map((option) => String(option.const)).join(', ')}`
  if (schema.type === 'integer') return `must be an integer from ${schema.minimum} to ${schema.maximum}`
  if (schema.pattern !== undefined) return PATTERN_RULES[schema.pattern] ?? `must match ${schema.pattern}`
  if (schema.minLength !== undefined) return `must be at least ${schema.minLength} characters long`
  return 'is not valid'
}

/**
 * The keys with the one that signs first (the signers sign with the first): `selector` names
 * it, else the list's first signs. The others only verify (or, for receipts, are only
 * published): the first phase of a rotation that old and new instances survive side by side.
 */
function signingFirst<T> (selector: string, list: string, keys: T[], idOf: (key: T) => string, chosen: string | undefined): T[] {
  if (chosen === undefined) return keys
  const signing = keys.find((key) => idOf(key) === chosen)
  if (signing === undefined) throw new ConfigError(selector, `names no key of ${list} (got ${JSON.stringify(chosen)}; ids: ${keys.map(idOf).join(', ')})`)
  return [signing, ...keys.filter((key) => key !== signing)]
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/

/**
 * RECIPIENT_TAG_KEY, else the secret of the only OTP_HMAC_KEYS key, whose tags Redis already
 * holds (the service tagged recipients with the signing key before the variable existed).
 * With several keys, which one would depend on the phase of a rotation, so it must be named.
 */
function recipientTagKeyOf (env: Env, hmacKeys: MacKey[] | null): Config['recipientTagKey'] {
  const accept = env.RECIPIENT_TAG_KEY_ACCEPT ?? null
  if (env.RECIPIENT_TAG_KEY !== undefined) {
    const secret = Buffer.from(env.RECIPIENT_TAG_KEY, 'base64')
    if (!BASE64.test(env.RECIPIENT_TAG_KEY) || secret.length < 32) {
      throw new ConfigError('RECIPIENT_TAG_KEY', 'must be base64 of at least 32 bytes (openssl rand -base64 32)')
    }
    return { secret, borrowedFrom: null, accept }
  }
  if (hmacKeys === null) return { secret: randomBytes(32), borrowedFrom: null, accept }
  const [only, ...others] = hmacKeys
  if (only === undefined || others.length > 0) {
    throw new ConfigError('RECIPIENT_TAG_KEY', `is required when OTP_HMAC_KEYS lists more than one key (ids: ${hmacKeys.map((key) => key.id).join(', ')}): set it to the secret of the key that signed before the rotation began, so that suppressions, lockouts and recipient counts keep their keys (UPGRADING.md)`)
  }
  return { secret: only.secret, borrowedFrom: only.id, accept }
}

const MAC_KEY_ID = /^[A-Za-z0-9_-]{1,16}$/

function parseMacKeys (value: string): MacKey[] {
  const keys: MacKey[] = []
  for (const entry of value.split(',')) {
    const separator = entry.indexOf(':')
    const id = entry.slice(0, separator).trim()
    const secret = Buffer.from(entry.slice(separator + 1).trim(), 'base64')
    if (separator < 1 || !MAC_KEY_ID.test(id)) {
      throw new ConfigError('OTP_HMAC_KEYS', 'must be comma-separated id:secret pairs with ids of 1-16 letters, digits, - or _')
    }
    if (secret.length < 32) {
      throw new ConfigError('OTP_HMAC_KEYS', `key "${id}" must be base64 of at least 32 bytes (openssl rand -base64 32)`)
    }
    if (keys.some((key) => key.id === id)) throw new ConfigError('OTP_HMAC_KEYS', `lists key id "${id}" twice`)
    keys.push({ id, secret })
  }
  return keys
}

function parseCidrList (variable: string, value: string | undefined): string[] {
  if (value === undefined) return []
  const entries = value.split(',').map((entry) => entry.trim()).filter((entry) => entry !== '')
  for (const entry of entries) {
    if (!ipaddr.isValid(entry) && !isCidr(entry)) throw new ConfigError(variable, `has an entry that is not an address or CIDR: ${JSON.stringify(entry)}`)
  }
  return entries
}

function isCidr (entry: string): boolean {
  try {
    ipaddr.parseCIDR(entry)
    return true
  } catch {
    return false
  }
}

/** An address, or `Name <address>` with a name that cannot break out of the header. */
function isSender (value: string): boolean {
  const named = /^([^<>"\r\n\u0000-\u001f]*?)\s*<([^<>]+)>$/.exec(value)
  return validateEmail(named === null ? value : named[2] ?? '').ok
}
