import { Type, type Static } from '@sinclair/typebox'
import { ARN_LIST, DEFAULT_SNS_CERT_URL_PATTERN, DURATION_PATTERN, MAIL_TRANSPORT, RATE_LIMIT, RATE_LIMIT_OR_OFF, type NamedPattern } from './patterns.js'

const PositiveInt = (defaultValue: number, minimum: number, maximum: number, description: string) =>
  Type.Integer({ default: defaultValue, minimum, maximum, description })

/** `<NAME>_FILE`: the secret read from a file, as a mounted Kubernetes or Docker secret gives it. */
const SecretFile = (name: string) => Type.Optional(Type.String({ minLength: 1, description: `Path of a file holding ${name} (a mounted Secret; surrounding whitespace and the final newline are dropped). Not together with ${name}.` }))

/**
 * A string that must match a named pattern: the error line and the configuration table say
 * what it asks for in the pattern's own words (`patternRule`, `patternWords`).
 */
const Matching = (named: NamedPattern, options: { default?: string, description: string }) =>
  Type.String({ ...options, pattern: named.pattern, patternRule: named.rule, patternWords: named.words })

const REDIS_URL: NamedPattern = { pattern: '^rediss?://', rule: 'must be a redis:// or rediss:// URL', words: 'a `redis://` or `rediss://` URL' }
const SMTP_URL: NamedPattern = { pattern: '^smtps?://', rule: 'must be an smtp:// or smtps:// URL', words: 'an `smtp://` or `smtps://` URL' }
const HTTP_URL: NamedPattern = { pattern: '^https?://', rule: 'must be an http:// or https:// URL', words: 'an `http://` or `https://` URL' }
const ONE_WORD: NamedPattern = { pattern: '^\\S+$', rule: 'must be one word, without spaces', words: 'one word, no spaces' }
const AWS_REGION: NamedPattern = { pattern: '^[a-z]{2}(-[a-z]+)+-[0-9]+$', rule: 'must be an AWS region such as eu-west-1', words: 'an AWS region name (`eu-west-1`)' }
const ID_64: NamedPattern = { pattern: '^[A-Za-z0-9_-]{1,64}$', rule: 'must be 1 to 64 letters, digits, _ or -', words: '1 to 64 letters, digits, `_` or `-`' }
const ID_16: NamedPattern = { pattern: '^[A-Za-z0-9_-]{1,16}$', rule: 'must be 1 to 16 letters, digits, _ or -', words: '1 to 16 letters, digits, `_` or `-`' }
const FINGERPRINT: NamedPattern = { pattern: '^[A-Za-z0-9_-]{16}$', rule: 'must be the 16-character fingerprint the refusal line printed', words: 'the 16-character fingerprint the refusal line printed' }
const PRINTABLE: NamedPattern = { pattern: '^[\\x21-\\x7e]{1,200}$', rule: 'must be 1 to 200 printable ASCII characters, without spaces', words: '1 to 200 printable ASCII characters, no space' }
const RATE_OR_OFF: NamedPattern = { pattern: '^(off|0\\.[0-9]*[1-9][0-9]*)$', rule: 'must be a rate above 0 and below 1 (e.g. 0.04), or off', words: 'a rate above `0` and below `1` (`0.04`), or `off`' }
const RATIO: NamedPattern = { pattern: '^(0(\\.[0-9]+)?|1(\\.0+)?)$', rule: 'must be a ratio from 0 to 1 (e.g. 0.01)', words: 'a ratio from `0` to `1` (`0.01`)' }

/**
 * Every configured duration: `500ms`, `5s`, `15m`, `24h`, `30d`, and for a variable named
 * after its unit (`plain`) a plain number in that unit, as it always took. The bounds
 * (`minimum`, `maximum`, durations themselves) are checked when the configuration is read.
 */
const Duration = (fallback: string, plain: 'ms' | 's' | null, minimum: string, maximum: string, description: string) =>
  Type.String({
    default: fallback,
    pattern: DURATION_PATTERN,
    description,
    durationUnit: plain,
    durationMinimum: minimum,
    durationMaximum: maximum
  })

/**
 * The process environment the service reads, and nothing else. `npm run docs` writes the
 * table of docs/configuration.md from these names, defaults, descriptions and allowed values.
 */
export const EnvSchema = Type.Object({
  HOST: Type.String({ default: '127.0.0.1', minLength: 1, description: 'Address to listen on (0.0.0.0 in containers).' }),
  PORT: PositiveInt(3000, 0, 65535, 'TCP port to listen on.'),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info', description: 'pino log level.' }
  ),
  TENANTS_FILE: Type.Optional(Type.String({ minLength: 1, description: 'Path of the tenants file (JSON). Unset: the built-in demo tenant with the documented sandbox key.' })),
  TEMPLATES_DIR: Type.Optional(Type.String({ minLength: 1, description: 'Folder of the tenants\' template files: a folder per tenant (`<TEMPLATES_DIR>/<tenant id>/`) holds the files its `{ "file": … }` templates name. Unset: `templates/` beside TENANTS_FILE. It must not be or contain the tenants file\'s folder, nor contain a block list. Only with TENANTS_FILE.' })),
  TENANTS_FILE_MAX_BYTES: PositiveInt(4 * 1024 * 1024, 64 * 1024, 64 * 1024 * 1024, 'Largest tenants file read: a larger one is refused before it is read or parsed (at start the service does not start; a reload keeps the tenants in force and logs why). Only with TENANTS_FILE.'),
  REDIS_URL: Type.Optional(Matching(REDIS_URL, { description: 'redis:// or rediss:// URL. Set: tokens and counters live in Redis, shared by every instance. Unset: in memory, one instance.' })),
  REDIS_SENTINELS: Type.Optional(Type.String({ minLength: 1, description: 'Comma-separated host:port of Redis Sentinels (IPv6 as `[::1]:26379`), instead of REDIS_URL: the service talks to the primary they name (REDIS_SENTINEL_NAME) and follows failovers.' })),
  REDIS_SENTINEL_NAME: Type.Optional(Matching(ONE_WORD, { description: 'Name of the primary the Sentinels monitor (their `sentinel monitor <name> …`). Required with REDIS_SENTINELS.' })),
  REDIS_CLUSTER_NODES: Type.Optional(Type.String({ minLength: 1, description: 'Comma-separated host:port of some Redis Cluster nodes, instead of REDIS_URL: the rest are discovered. Commands go to primaries only.' })),
  REDIS_USERNAME: Type.Optional(Type.String({ minLength: 1, description: 'ACL user for the Redis servers with REDIS_SENTINELS or REDIS_CLUSTER_NODES (REDIS_URL carries its own). Needs REDIS_PASSWORD.' })),
  REDIS_PASSWORD: Type.Optional(Type.String({ minLength: 1, description: 'Password for the Redis servers with REDIS_SENTINELS or REDIS_CLUSTER_NODES (REDIS_URL carries its own). Sentinels themselves are reached without one. Never echoed in errors.' })),
  REDIS_TLS: Type.Union([Type.Literal('false'), Type.Literal('true')], { default: 'false', description: 'true: TLS to every Redis server (and Sentinel) with REDIS_SENTINELS or REDIS_CLUSTER_NODES, as rediss:// does for REDIS_URL.' }),
  REDIS_COMMAND_TIMEOUT_MS: Duration('500', 'ms', '50ms', '10s', 'A Redis command not answered within this time fails the request with 503. Only with REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES.'),
  REDIS_REPLICA_ACKS: PositiveInt(0, 0, 16, 'Replicas that must acknowledge a new code and a used one (Redis WAIT, on a Cluster to the primary that took each write) before dispatch or verify answers, and a redemption, a suppression or an unlock; too few within REDIS_REPLICA_ACK_TIMEOUT_MS and the request is undone and answers 503, so single use survives a failover. 0: no wait. Only with REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES.'),
  REDIS_REPLICA_ACK_TIMEOUT_MS: Duration('100', 'ms', '1ms', '10s', 'How long a dispatch or verify waits for REDIS_REPLICA_ACKS acknowledgements; below REDIS_COMMAND_TIMEOUT_MS. Only with REDIS_REPLICA_ACKS of 1 or more.'),
  OTP_HMAC_KEYS: Type.Optional(Type.String({ minLength: 1, description: 'Comma-separated `id:secret` pairs (secret: base64 of at least 32 bytes, e.g. `openssl rand -base64 32`). The first signs new codes; all verify. Required with REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES; unset on the embedded default, a per-process key is generated (with a warning).' })),
  RECIPIENT_TAG_KEY: Type.Optional(Type.String({ minLength: 1, description: 'Base64 of at least 32 bytes (`openssl rand -base64 32`): the key of the recipient tags that suppressions, lockouts and recipient counters are kept under, and of the address hashes of tenants without `addressHashKey`. It does not rotate with OTP_HMAC_KEYS, so a rotation leaves all of them where they were; a new value starts them afresh. Unset: the secret of the only key of OTP_HMAC_KEYS (with a warning; required once it lists more than one), or a per-process key on the embedded default.' })),
  RECIPIENT_TAG_KEY_ACCEPT: Type.Optional(Matching(FINGERPRINT, { description: 'The fingerprint of a new recipient tag key (the refusal line prints it), to start with it on a Redis whose suppressions, lockouts and recipient counts were written under another key: they start afresh. Without it such a start is refused. Harmless once adopted; remove it after the rollout.' })),
  OTP_TTL_SECONDS: Duration('600', 's', '1s', '1d', 'Lifetime of a code, unless the tenant overrides it.'),
  RECEIPT_SIGNING_KEYS: Type.Optional(Type.String({ minLength: 1, description: 'Comma-separated `kid:key` pairs, key: base64 of a PKCS#8 DER Ed25519 or P-256 private key. The first signs verification receipts; all are published at /.well-known/jwks.json. Unset: Ed25519 keys derived from OTP_HMAC_KEYS (the first signs, all are published; per process on the embedded default without OTP_HMAC_KEYS, with a warning).' })),
  RECEIPT_ISSUER: Matching(PRINTABLE, { default: 'email-otp', description: 'The `iss` claim of receipts, e.g. the public base URL of the service.' }),
  RECEIPT_TTL_SECONDS: Duration('300', 's', '10s', '1h', 'Lifetime of a verification receipt.'),
  MEMORY_STORE_MAX_TOKENS: PositiveInt(1_000_000, 1, 50_000_000, 'Cap on live codes per tenant and mode in the in-memory store (about 190 bytes each); past it, that tenant\'s dispatches in that mode answer 503, and no other tenant\'s. Only on the embedded default (no Redis).'),
  MAIL_TRANSPORT: Matching(MAIL_TRANSPORT, { default: 'log', description: 'How live mail leaves: log (prints it), ses, smtp, or an ordered list of providers (`ses,smtp`): a send that times out, cannot connect, is throttled or meets a provider-side error goes to the next; a rejected message does not.' }),
  MAIL_TIMEOUT_MS: Duration('5000', 'ms', '100ms', '1m', 'Upper bound for handing one message to one provider, retries included. With a list, each provider has its own; a dispatch answers within their sum, and 502 once all failed.'),
  VERIFICATION_LOG_DAYS: PositiveInt(7, 1, 90, 'How long GET /verifications/{requestId} can tell a verification\'s story, from when it was requested.'),
  VERIFICATION_LOG_MAX_PER_TENANT: PositiveInt(100_000, 1, 10_000_000, 'Verification stories kept per tenant and mode of those its backend dispatched (secret keys); past it the least recently requested of them is forgotten. Its pages (restricted keys) keep half as many more, forgetting only their own. In memory (no Redis) at most 10,000 (and 5,000).'),
  INSIGHTS_DAYS: PositiveInt(90, 1, 400, 'How long GET /insights keeps a tenant\'s hour and day buckets after their end (on Redis, 90 days of a tenant\'s traffic every hour in one mode take about 0.6 MB, at most about 3 MB; docs/insights.md).'),
  SUPPRESSION_DAYS: PositiveInt(30, 1, 3650, 'How long a permanent bounce, a complaint or POST /recipients/suppress keeps a mailbox from getting codes of that tenant.'),
  REPUTATION_BOUNCE_RATE: Matching(RATE_OR_OFF, { default: '0.04', description: 'A tenant whose live mail bounces permanently at this rate or more, over REPUTATION_WINDOW with at least REPUTATION_MIN_SENDS sends, has its live sending paused (403 TENANT_SENDING_PAUSED). Below SES\'s review level (5%), so one tenant is stopped before the shared account is reviewed. `off`: bounces pause no one.' }),
  REPUTATION_COMPLAINT_RATE: Matching(RATE_OR_OFF, { default: '0.0008', description: 'Likewise for complaints (SES reviews an account at 0.1%). `off`: complaints pause no one; both `off`: the guard is off.' }),
  REPUTATION_MIN_SENDS: PositiveInt(200, 1, 100_000_000, 'Live sends a tenant must have in REPUTATION_WINDOW before its rates can pause it: below it a handful of bounces is noise (2 of 20 is 10%).'),
  REPUTATION_WINDOW: Duration('24h', null, '1h', '7d', 'The rolling window the rates are counted over, in hourly buckets (whole hours). A pause lifts by itself once the window\'s rates fall below the thresholds.'),
  MAIL_BREAKER_FAILURES: PositiveInt(5, 1, 1000, 'Consecutive failed sends after which a provider of a MAIL_TRANSPORT list is skipped (its circuit opens).'),
  MAIL_BREAKER_OPEN_SECONDS: Duration('30', 's', '1s', '1h', 'How long an open circuit skips its provider before one probe send may try it again.'),
  SMTP_URL: Type.Optional(Matching(SMTP_URL, { description: 'smtp:// (STARTTLS required) or smtps:// (implicit TLS) URL with credentials, for MAIL_TRANSPORT=smtp. `?tls=off` allows plaintext, for a relay on localhost only.' })),
  AWS_REGION: Type.Optional(Matching(AWS_REGION, { description: 'SES region, for MAIL_TRANSPORT=ses. Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID…, profiles, instance roles).' })),
  AWS_ENDPOINT_URL_SESV2: Type.Optional(Matching(HTTP_URL, { description: 'Overrides the SES endpoint (a VPC endpoint, or a local emulator).' })),
  SES_CONFIGURATION_SET: Type.Optional(Matching(ID_64, { description: 'SES configuration set for event publishing.' })),
  SES_FEEDBACK_TOPIC_ARNS: Type.Optional(Matching(ARN_LIST, { description: 'Comma-separated ARNs of the SNS topics SES publishes delivery events to: POST /feedback/ses accepts (and confirms subscriptions of) only these. Unset: every message is refused.' })),
  SNS_SIGNING_CERT_URL_PATTERN: Type.String({ default: DEFAULT_SNS_CERT_URL_PATTERN, minLength: 1, description: 'Regular expression an SNS message\'s SigningCertURL must match, whole, before the certificate is fetched. Whatever it says, the URL must also be at most 256 characters, https on port 443, written in its canonical form, without credentials, query or fragment, on a DNS name (no IP literal), with a path ending .pem; and the pattern must name the host whole (a pattern that also matches the URL on a longer host refuses it). The default allows only SNS\'s own certificate URLs (sns.<region>.amazonaws.com and .amazonaws.com.cn, SimpleNotificationService-<hex>.pem); set it for another partition, never wider.' }),
  MAIL_FROM: Type.Optional(Type.String({ minLength: 3, description: 'Sender address (or "Name <address>"). Required for ses and smtp; a tenant\'s brand.from overrides it.' })),
  BODY_LIMIT_BYTES: PositiveInt(4096, 256, 1_048_576, 'Largest accepted request body; larger answers 413 before the key is checked.'),
  TRUST_PROXY: Type.Optional(Type.String({ description: 'Comma-separated addresses or CIDRs of proxies whose X-Forwarded-For is trusted. Unset: trust none and use the socket address.' })),
  IP_BLOCKLISTS: Type.Optional(Type.String({ description: 'Comma-separated paths or URLs of CIDR lists (proxy, VPN, hosting, burner ranges): one address or CIDR a line, `#` comments. Sources on them get 403.' })),
  TOR_EXIT_LIST: Type.Optional(Type.String({ description: 'Path or URL of the Tor exit list (https://check.torproject.org/torbulkexitlist format). Sources on it get 403.' })),
  BLOCKLIST_REFRESH_SECONDS: Duration('3600', 's', '1s', '7d', 'How often block lists are re-read in the background; a failed or suspicious refresh keeps the last good list.'),
  IPV6_BUCKET_PREFIX: PositiveInt(64, 32, 128, 'IPv6 clients share one per-source bucket per prefix of this length.'),
  RATE_LIMIT_RECIPIENT: Matching(RATE_LIMIT, { default: '5/15m', description: 'Dispatches per recipient mailbox, tenant and lane (codes asked for by secret keys, or by restricted keys; all spellings of one mailbox count once): `max/window`.' }),
  RATE_LIMIT_SOURCE: Matching(RATE_LIMIT, { default: '30/1m', description: 'Requests per source address (IPv6 per prefix; the end user\'s address when a backend sends End-User-IP), dispatch and verify: `max/window`.' }),
  RATE_LIMIT_BACKEND: Matching(RATE_LIMIT, { default: '6000/1m', description: 'Requests per API key and backend address when the backend forwards its end users with End-User-IP: `max/window`.' }),
  RATE_LIMIT_KEY: Matching(RATE_LIMIT, { default: '600/1m', description: 'Requests per API key: dispatches, and verifies that find a live code (made-up requestIds and refused requests count only against their source): `max/window`.' }),
  RATE_LIMIT_MAILBOX: Matching(RATE_LIMIT_OR_OFF, { default: '15/15m', description: 'Dispatches per recipient mailbox and lane across every tenant (live and sandbox counted apart); a tenant that has sent the mailbox fewer than 2 in the lane within the window passes it whatever its count: `max/window`, or `off`.' }),
  RATE_LIMIT_ACCOUNT: Matching(RATE_LIMIT, { default: '60/1m', description: 'Requests per API key to each account route (/usage, /verifications/{requestId}, /insights, /sandbox/messages, /recipients/unlock, /recipients/suppress, /recipients/unsuppress, /templates/preview): `max/window`.' }),
  RATE_LIMIT_PREVIEW: Matching(RATE_LIMIT, { default: '60/1m', description: 'Template previews (POST /templates/preview) per tenant, all its keys together, besides RATE_LIMIT_ACCOUNT per key; one preview per tenant renders at a time per instance: `max/window`.' }),
  RATE_LIMIT_PUBLIC: Matching(RATE_LIMIT, { default: '120/1m', description: 'Requests per client address to each public route (/docs, /openapi.json, /.well-known/jwks.json) and to unknown paths: `max/window`. Probes (/healthz, /readyz) are never limited.' }),
  LOCKOUT_THRESHOLD: PositiveInt(10, 1, 100_000_000, 'Consecutive wrong guesses for one recipient mailbox in one lane (across requestIds, sources and keys) that lock that lane for LOCKOUT_DURATION.'),
  LOCKOUT_DURATION: Duration('15m', null, '1s', '9999999d', 'Length of the first lock; each further consecutive wrong guess doubles it.'),
  LOCKOUT_MAX_DURATION: Duration('30d', null, '1s', '9999999d', 'Longest lock.'),
  LOCKOUT_RESET_AFTER: Duration('30d', null, '1s', '9999999d', 'A run of wrong guesses is forgotten this long after its last wrong guess or the end of its lock; a right guess forgets it at once.'),
  WEBHOOK_TIMEOUT_MS: Duration('10000', 'ms', '100ms', '1m', 'Upper bound for one webhook delivery attempt (connection, TLS, answer).'),
  WEBHOOK_CONCURRENCY_PER_ENDPOINT: PositiveInt(4, 1, 100, 'Webhook attempts in flight at once per endpoint, per instance.'),
  WEBHOOK_MAX_IN_FLIGHT_PER_TENANT: PositiveInt(8, 1, 64, 'Webhook attempts in flight at once per tenant, per instance, of the 64 an instance runs: a tenant whose endpoints never answer holds at most this many.'),
  WEBHOOK_MAX_QUEUED_PER_TENANT: PositiveInt(10000, 100, 1_000_000, 'Webhook deliveries one tenant may have queued (waiting, in flight or due for a retry), and dead letters it keeps. Past it, that tenant\'s longest-waiting deliveries move to its own dead letters.'),
  WEBHOOK_RETRY_BASE_MS: Duration('5000', 'ms', '10ms', '1h', 'Delay before the first webhook retry; each later one doubles, with jitter.'),
  WEBHOOK_RETRY_MAX_DELAY_MS: Duration('7200000', 'ms', '10ms', '1d', 'Longest delay between two webhook attempts.'),
  WEBHOOK_RETRY_FOR: Duration('24h', null, '1s', '9999999d', 'How long a failing webhook delivery is retried before it goes to the dead letters.'),
  WEBHOOK_ALLOW_HTTP_LOOPBACK: Type.Union([Type.Literal('false'), Type.Literal('true')], { default: 'false', description: 'true: webhook URLs may be http:// on a loopback host (development and tests). Otherwise https only.' }),
  WEBHOOK_ALLOWED_NETWORKS: Type.Optional(Type.String({ description: 'Comma-separated CIDRs that webhook URLs may resolve into although they are private, loopback, link-local or otherwise not public.' })),
  METRICS_TOKEN: Type.Optional(Type.String({ minLength: 16, description: 'When set, the public listener serves GET /metrics and the details of GET /readyz to callers with `Authorization: Bearer <METRICS_TOKEN>`. Unset: neither is on the public listener.' })),
  METRICS_PORT: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535, description: 'When set, an internal listener on METRICS_HOST:METRICS_PORT serves /metrics, /readyz with details and /healthz, without credentials. Must differ from PORT.' })),
  METRICS_HOST: Type.Optional(Type.String({ minLength: 1, description: 'Address of the internal listener (127.0.0.1 unless set). Only with METRICS_PORT.' })),
  CAPTCHA_TIMEOUT_MS: Duration('3000', 'ms', '100ms', '30s', 'Upper bound for one CAPTCHA check at the provider; a slower provider answers 503 UNAVAILABLE (fails closed).'),
  REQUEST_TIMEOUT_MS: Duration('10000', 'ms', '100ms', '5m', 'Headers and body of a request must arrive within this time; a slower client gets 408 and is disconnected. An answer the client does not take within this time (it does not read) closes its connection.'),
  MAX_CONNECTIONS_PER_SOURCE: PositiveInt(128, 0, 1_000_000, 'Open connections one source address (IPv6: one IPV6_BUCKET_PREFIX) may hold; more are answered 429 and closed. Proxies in TRUST_PROXY are exempt. 0: no limit.'),
  REFUSAL_PACE_PER_SECOND: PositiveInt(20, 0, 1_000_000, 'Refusals (401, 403, 429) a second one source address (IPv6: one IPV6_BUCKET_PREFIX; behind TRUST_PROXY, the forwarded client; behind a mesh sidecar, an internal caller\'s workload or a gateway\'s end client) is answered at once, past REFUSAL_PACE_BURST; later ones are held up to REFUSAL_PACE_MAX_DELAY_MS before they are sent, so a client that keeps asking after a refusal waits instead of taking the event loop from everyone else. 0: no pace.'),
  REFUSAL_PACE_BURST: PositiveInt(40, 1, 1_000_000, 'Refusals one source is answered at once before REFUSAL_PACE_PER_SECOND applies.'),
  REFUSAL_PACE_MAX_DELAY_MS: Duration('1000', 'ms', '1ms', '30s', 'The longest a paced refusal is held.'),
  KEEP_ALIVE_TIMEOUT_MS: Duration('72000', 'ms', '100ms', '65m', 'An idle keep-alive connection is closed after this time; keep it above the idle timeout of every proxy and load balancer in front (72 s: above the 60 s of common load balancers and of the DestinationRule docs/mesh.md recommends; Envoy\'s own default is 1 h).'),
  SHUTDOWN_GRACE_MS: Duration('10000', 'ms', '0ms', '2m', 'After the drain (SHUTDOWN_DRAIN_MS), time allowed for in-flight requests before the process exits.'),

  // Running in Kubernetes behind a service mesh: workload identity, drain, secrets mounted as
  // files, the tenants file watched (docs/mesh.md).
  MESH_IDENTITY_HEADER: Type.Optional(Type.Union([Type.Literal('x-forwarded-client-cert'), Type.Literal('l5d-client-id')], { description: 'The header in which a sidecar at a TRUST_PROXY address passes the caller\'s verified workload identity: x-forwarded-client-cert (Envoy, Istio: the URI of its last element) or l5d-client-id (Linkerd). Read only from TRUST_PROXY peers. Keys may then be bound to `workloads`, and per-source limits count per workload, except a gateway\'s (MESH_GATEWAY_IDENTITIES). Needs MESH_GATEWAY_IDENTITIES.' })),
  MESH_GATEWAY_IDENTITIES: Type.Optional(Type.String({ minLength: 1, description: 'The workload identities of the gateways that forward end users\' requests to the service (an Istio ingress gateway, an ingress controller in the mesh), comma-separated: exact identities as MESH_IDENTITY_HEADER names them, or a prefix ending in `/*` for one more path segment; or `none` when only internal workloads call the service. Required with MESH_IDENTITY_HEADER. A gateway\'s requests are counted, blocked, paced and logged per end client, the X-Forwarded-For entry MESH_GATEWAY_TRUSTED_HOPS places left of the right-most one (fewer entries: 400 INVALID_FORWARDED_FOR); every other identity\'s per workload. Keys bound to `workloads` are checked against the gateway\'s own identity.' })),
  MESH_GATEWAY_TRUSTED_HOPS: PositiveInt(0, 0, 15, 'Proxies in front of the gateways of MESH_GATEWAY_IDENTITIES that append to X-Forwarded-For (load balancers): the gateway\'s own numTrustedProxies (Istio) or xff_num_trusted_hops (Envoy). The end client is the entry this many places left of the right-most one, which the gateway appended. Only with MESH_GATEWAY_IDENTITIES.'),
  OTP_HMAC_KEYS_FILE: SecretFile('OTP_HMAC_KEYS'),
  RECIPIENT_TAG_KEY_FILE: SecretFile('RECIPIENT_TAG_KEY'),
  RECEIPT_SIGNING_KEYS_FILE: SecretFile('RECEIPT_SIGNING_KEYS'),
  REDIS_URL_FILE: SecretFile('REDIS_URL'),
  REDIS_PASSWORD_FILE: SecretFile('REDIS_PASSWORD'),
  SMTP_URL_FILE: SecretFile('SMTP_URL'),
  METRICS_TOKEN_FILE: SecretFile('METRICS_TOKEN'),
  OTP_HMAC_SIGNING_KEY: Type.Optional(Matching(ID_16, { description: 'Id of the key of OTP_HMAC_KEYS that signs new codes (unset: the first). The others only verify: a key is added verify-only in one rollout and promoted to signing in the next, so old and new instances always verify each other\'s codes. With derived receipt keys, the key derived from it signs receipts.' })),
  RECEIPT_SIGNING_KEY: Type.Optional(Matching(ID_64, { description: 'kid of the key of RECEIPT_SIGNING_KEYS that signs receipts (unset: the first). The others are only published at /.well-known/jwks.json: a key is published in one rollout and promoted to signing in the next.' })),
  SHUTDOWN_DRAIN_MS: Duration('5000', 'ms', '0ms', '2m', 'On SIGTERM, /readyz answers 503 at once and every route keeps serving this long, while Kubernetes, the mesh and load balancers stop sending; then the graceful close (SHUTDOWN_GRACE_MS). 5 s covers how long endpoint removal takes to reach kube-proxy and sidecars.'),

  // OpenTelemetry tracing: the standard OTEL_* variables, read as the specification defines
  // them. Tracing is on when an OTLP endpoint is set (or OTEL_TRACES_EXPORTER=otlp), off otherwise.
  OTEL_SERVICE_NAME: Matching(PRINTABLE, { default: 'email-otp', description: 'service.name of the spans.' }),
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.Optional(Matching(HTTP_URL, { description: 'Base URL of the OTLP/HTTP collector; traces go to `<it>/v1/traces`. Set: tracing is on.' })),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.Optional(Matching(HTTP_URL, { description: 'Full URL traces are sent to, used as is (overrides OTEL_EXPORTER_OTLP_ENDPOINT). Set: tracing is on.' })),
  OTEL_EXPORTER_OTLP_PROTOCOL: Type.Union([Type.Literal('http/protobuf'), Type.Literal('http/json')], { default: 'http/protobuf', description: 'OTLP encoding: http/protobuf or http/json (gRPC is not supported).' }),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Type.Optional(Type.Union([Type.Literal('http/protobuf'), Type.Literal('http/json')], { description: 'Overrides OTEL_EXPORTER_OTLP_PROTOCOL for traces.' })),
  OTEL_EXPORTER_OTLP_HEADERS: Type.Optional(Type.String({ description: 'Headers sent with every export: comma-separated `key=value` (values URL-encoded), e.g. a vendor\'s API key.' })),
  OTEL_EXPORTER_OTLP_HEADERS_FILE: SecretFile('OTEL_EXPORTER_OTLP_HEADERS'),
  OTEL_TRACES_EXPORTER: Type.Optional(Type.Union([Type.Literal('otlp'), Type.Literal('none')], { description: 'none: tracing off whatever else is set. otlp: on (to http://localhost:4318 unless an endpoint is set).' })),
  OTEL_TRACES_SAMPLER: Type.Union(
    ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'].map((name) => Type.Literal(name)),
    { default: 'parentbased_always_on', description: 'Which traces are recorded. parentbased_*: an incoming traceparent\'s sampled flag decides.' }
  ),
  OTEL_TRACES_SAMPLER_ARG: Type.Optional(Matching(RATIO, { description: 'The ratio for traceidratio samplers, 0 to 1 (default 1).' })),
  OTEL_BSP_SCHEDULE_DELAY: PositiveInt(5000, 1, 600_000, 'Milliseconds between two exports of finished spans.'),
  OTEL_BSP_EXPORT_TIMEOUT: PositiveInt(30000, 1, 600_000, 'Longest an export may take, in milliseconds.'),
  OTEL_BSP_MAX_QUEUE_SIZE: PositiveInt(2048, 1, 1_000_000, 'Finished spans kept waiting for export; past it new spans are dropped (never the request).'),
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: PositiveInt(512, 1, 1_000_000, 'Spans per export (at most OTEL_BSP_MAX_QUEUE_SIZE).')
})

export type Env = Static<typeof EnvSchema>

/** Variables whose values must never be echoed in an error line; each may also come from `<NAME>_FILE`. */
export const secretEnvVariables: ReadonlySet<string> = new Set(['OTP_HMAC_KEYS', 'RECIPIENT_TAG_KEY', 'RECEIPT_SIGNING_KEYS', 'REDIS_URL', 'REDIS_PASSWORD', 'SMTP_URL', 'METRICS_TOKEN', 'OTEL_EXPORTER_OTLP_HEADERS'])
