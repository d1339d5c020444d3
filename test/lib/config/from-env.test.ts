import t from 'tap'
import { ConfigError, parseConfig, parseRedisToolConfig } from '../../../lib/config/from-env.js'
import { EnvSchema } from '../../../schemas/env.js'
import { TEST_HMAC_KEYS } from '../../helper.js'

t.test('defaults give the embedded service', async (t) => {
  const config = parseConfig({})
  t.equal(config.port, 3000)
  t.equal(config.host, '127.0.0.1')
  t.equal(config.redisUrl, null)
  t.equal(config.otpTtlSeconds, 600)
  t.equal(config.bodyLimitBytes, 4096)
  t.same(config.mailTransports, ['log'])
  t.equal(config.hmacKeyGenerated, true)
  t.equal(config.hmacKeys[0]?.secret.length, 32)
  t.same(config.trustProxy, [])
})

t.test('values are converted and checked', async (t) => {
  const config = parseConfig({ PORT: '8080', OTP_TTL_SECONDS: '300', TRUST_PROXY: '10.0.0.0/8, ::1', OTP_HMAC_KEYS: TEST_HMAC_KEYS + ',old:' + Buffer.alloc(40, 1).toString('base64'), RECIPIENT_TAG_KEY: Buffer.alloc(32, 9).toString('base64'), LOG_LEVEL: '' })
  t.equal(config.port, 8080)
  t.equal(config.otpTtlSeconds, 300)
  t.same(config.trustProxy, ['10.0.0.0/8', '::1'])
  t.same(config.hmacKeys.map((key) => key.id), ['k1', 'old'])
  t.equal(config.logLevel, 'info', 'an empty variable means unset')
})

t.test('one duration type: ms, s, m, h, d everywhere; plain numbers in the unit a variable always had', async (t) => {
  const old = parseConfig({ OTP_TTL_SECONDS: '300', RECEIPT_TTL_SECONDS: '60', MAIL_TIMEOUT_MS: '2500', BLOCKLIST_REFRESH_SECONDS: '7200', WEBHOOK_RETRY_MAX_DELAY_MS: '7200000', SHUTDOWN_GRACE_MS: '0', LOCKOUT_DURATION: '15m', WEBHOOK_RETRY_FOR: '24h' })
  t.same([old.otpTtlSeconds, old.receipts.ttlSeconds, old.mailTimeoutMs, old.blocklists.refreshMs, old.webhooks.retry.maxDelayMs, old.shutdownGraceMs, old.lockout.baseMs, old.webhooks.retry.forMs],
    [300, 60, 2500, 7_200_000, 7_200_000, 0, 900_000, 86_400_000], 'the forms accepted so far keep their meaning')
  const spelled = parseConfig({ OTP_TTL_SECONDS: '5m', RECEIPT_TTL_SECONDS: '1m', MAIL_TIMEOUT_MS: '2500ms', BLOCKLIST_REFRESH_SECONDS: '2h', WEBHOOK_RETRY_MAX_DELAY_MS: '2h', SHUTDOWN_GRACE_MS: '0s', LOCKOUT_DURATION: '900s', WEBHOOK_RETRY_FOR: '1d', REQUEST_TIMEOUT_MS: '10s', LOCKOUT_RESET_AFTER: '90m' })
  t.same([spelled.otpTtlSeconds, spelled.receipts.ttlSeconds, spelled.mailTimeoutMs, spelled.blocklists.refreshMs, spelled.webhooks.retry.maxDelayMs, spelled.shutdownGraceMs, spelled.lockout.baseMs, spelled.webhooks.retry.forMs, spelled.requestTimeoutMs],
    [300, 60, 2500, 7_200_000, 7_200_000, 0, 900_000, 86_400_000, 10_000], 'the same values with units')
  t.equal(spelled.lockout.resetAfterMs, 5_400_000)
  const refused: Array<[Record<string, string>, string]> = [
    [{ OTP_TTL_SECONDS: '1500ms' }, 'OTP_TTL_SECONDS must be whole seconds (got "1500ms")'],
    [{ OTP_TTL_SECONDS: '2d' }, 'OTP_TTL_SECONDS must be a duration from 1s to 1d, such as 500ms, 30s, 15m, 24h or 30d (a plain number is seconds) (got "2d")'],
    [{ MAIL_TIMEOUT_MS: '99ms' }, 'MAIL_TIMEOUT_MS must be a duration from 100ms to 1m, such as 500ms, 30s, 15m, 24h or 30d (a plain number is milliseconds) (got "99ms")'],
    [{ LOCKOUT_DURATION: '900' }, 'LOCKOUT_DURATION must be a duration from 1s to 9999999d, such as 500ms, 30s, 15m, 24h or 30d (got "900")'],
    [{ WEBHOOK_RETRY_FOR: '1.5h' }, 'WEBHOOK_RETRY_FOR must be a duration from 1s to 9999999d, such as 500ms, 30s, 15m, 24h or 30d (got "1.5h")'],
    [{ REDIS_COMMAND_TIMEOUT_MS: '1w' }, 'REDIS_COMMAND_TIMEOUT_MS must be a duration from 50ms to 10s, such as 500ms, 30s, 15m, 24h or 30d (a plain number is milliseconds) (got "1w")']
  ]
  for (const [env, message] of refused) t.equal((t.throws(() => parseConfig(env)) as ConfigError).message, `Invalid configuration: ${message}`)
})

t.test('a bad value stops start-up with one line naming the variable', async (t) => {
  const cases: Array<[Record<string, string>, string, RegExp]> = [
    [{ PORT: 'abc' }, 'PORT', /^Invalid configuration: PORT must be an integer from 0 to 65535 \(got "abc"\)$/],
    [{ PORT: '70000' }, 'PORT', /PORT must be an integer/],
    [{ OTP_TTL_SECONDS: '0' }, 'OTP_TTL_SECONDS', /OTP_TTL_SECONDS must be a duration from 1s to 1d/],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL', /LOG_LEVEL must be one of fatal, error/],
    [{ MAIL_TRANSPORT: 'pigeon' }, 'MAIL_TRANSPORT', /MAIL_TRANSPORT must be one of log, ses, smtp/],
    [{ REDIS_URL: 'http://x' }, 'REDIS_URL', /REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL/],
    [{ METRICS_TOKEN: 'short' }, 'METRICS_TOKEN', /METRICS_TOKEN must be at least 16 characters long/],
    [{ MAIL_FROM: 'not an address' }, 'MAIL_FROM', /MAIL_FROM must be an email address, or "Name <address>"/],
    [{ MAIL_FROM: 'Codes <not an address>' }, 'MAIL_FROM', /MAIL_FROM must be an email address/],
    [{ MAIL_FROM: 'Evil\r\nBcc: x@y.z <codes@otp.test>' }, 'MAIL_FROM', /MAIL_FROM must be an email address/],
    [{ RATE_LIMIT_SOURCE: 'lots' }, 'RATE_LIMIT_SOURCE', /RATE_LIMIT_SOURCE must be max\/window: .* \(e\.g\. 30\/1m\)/],
    [{ RATE_LIMIT_MAILBOX: 'never' }, 'RATE_LIMIT_MAILBOX', /must be max\/window \(e\.g\. 15\/15m\) or off/],
    [{ LOCKOUT_DURATION: 'forever' }, 'LOCKOUT_DURATION', /LOCKOUT_DURATION must be a duration/],
    [{ REDIS_URL: 'redis://127.0.0.1:6379' }, 'OTP_HMAC_KEYS', /OTP_HMAC_KEYS is required when REDIS_URL is set/],
    [{ OTP_HMAC_KEYS: 'k1:c2hvcnQ=' }, 'OTP_HMAC_KEYS', /at least 32 bytes/],
    [{ OTP_HMAC_KEYS: 'nocolon' }, 'OTP_HMAC_KEYS', /id:secret pairs/],
    [{ OTP_HMAC_KEYS: `${TEST_HMAC_KEYS},${TEST_HMAC_KEYS}` }, 'OTP_HMAC_KEYS', /twice/],
    [{ MAIL_TRANSPORT: 'ses' }, 'MAIL_FROM', /MAIL_FROM is required when MAIL_TRANSPORT=ses/],
    [{ TRUST_PROXY: '10.0.0.0/8,banana' }, 'TRUST_PROXY', /not an address or CIDR/]
  ]
  for (const [env, variable, message] of cases) {
    const error = t.throws(() => parseConfig(env)) as ConfigError
    t.ok(error instanceof ConfigError, JSON.stringify(env))
    t.equal(error.variable, variable)
    t.match(error.message, message)
    t.notMatch(error.message, /\n/, 'one line')
  }
})

t.test('every rule is said in words, never as a regular expression', async (t) => {
  const { EnvSchema } = await import('../../../schemas/env.js')
  for (const [variable, schema] of Object.entries(EnvSchema.properties)) {
    const pattern = (schema as { pattern?: string }).pattern
    if (pattern === undefined) continue
    const error = t.throws(() => parseConfig({ [variable]: 'a value\u00a0no pattern here takes' })) as Error
    t.notMatch(error.message, /must match/, variable)
  }
})

t.test('MAIL_FROM takes an address or a named one', async (t) => {
  t.equal(parseConfig({ MAIL_FROM: 'codes@otp.test' }).mailFrom, 'codes@otp.test')
  t.equal(parseConfig({ MAIL_FROM: 'Acme Codes <codes@otp.test>' }).mailFrom, 'Acme Codes <codes@otp.test>')
})

t.test('secret values are never echoed', async (t) => {
  const error = t.throws(() => parseConfig({ REDIS_URL: 'http://user:hunter2@x' })) as Error
  t.notMatch(error.message, /hunter2/)
})

t.test('docs/configuration.md documents every variable the service reads', async (t) => {
  const { readFileSync } = await import('node:fs')
  const { EnvSchema } = await import('../../../schemas/env.js')
  const readme = readFileSync(new URL('../../../docs/configuration.md', import.meta.url), 'utf8')
  for (const variable of Object.keys(EnvSchema.properties)) {
    t.match(readme, new RegExp(`^\\| \`${variable}\` \\|`, 'm'), `${variable} is in the configuration table`)
  }
})

t.test('velocity limits and lockout parse from max/window', async (t) => {
  const config = parseConfig({ RATE_LIMIT_RECIPIENT: '3/10m', LOCKOUT_DURATION: '1h', IP_BLOCKLISTS: 'a.txt, https://x.test/list ' })
  t.same(config.rateLimits.recipient, { max: 3, windowMs: 600_000, spec: '3/10m' })
  t.same(config.rateLimits.source, { max: 30, windowMs: 60_000, spec: '30/1m' })
  t.same(config.rateLimits.backend, { max: 6000, windowMs: 60_000, spec: '6000/1m' })
  t.same(config.mailboxLimit, { max: 15, windowMs: 900_000, spec: '15/15m' }, 'the service-wide mailbox cap is on by default')
  t.equal(parseConfig({ RATE_LIMIT_MAILBOX: 'off' }).mailboxLimit, null)
  t.same(config.lockout, { threshold: 10, baseMs: 3_600_000, maxMs: 30 * 86_400_000, resetAfterMs: 30 * 86_400_000 })
  t.same(config.blocklists.ipSources, ['a.txt', 'https://x.test/list'])
  t.throws(() => parseConfig({ RATE_LIMIT_SOURCE: '30 per minute' }), /RATE_LIMIT_SOURCE must be max\/window/)
  t.throws(() => parseConfig({ RATE_LIMIT_MAILBOX: 'never' }), /RATE_LIMIT_MAILBOX must be max\/window .* or off/)
  t.throws(() => parseConfig({ LOCKOUT_DURATION: 'month' }), /LOCKOUT_DURATION must be a duration/)
  t.throws(() => parseConfig({ LOCKOUT_DURATION: '2d', LOCKOUT_MAX_DURATION: '1d' }), /LOCKOUT_MAX_DURATION must be at least LOCKOUT_DURATION/)
})

t.test('TENANTS_FILE_MAX_BYTES: 4 MiB unless set, only with TENANTS_FILE', async (t) => {
  t.equal(parseConfig({ TENANTS_FILE: '/etc/email-otp/tenants.json' }).tenantsFileMaxBytes, 4 * 1024 * 1024)
  t.equal(parseConfig({ TENANTS_FILE: '/etc/email-otp/tenants.json', TENANTS_FILE_MAX_BYTES: '1048576' }).tenantsFileMaxBytes, 1048576)
  t.throws(() => parseConfig({ TENANTS_FILE: '/etc/email-otp/tenants.json', TENANTS_FILE_MAX_BYTES: '1000' }), /TENANTS_FILE_MAX_BYTES must be an integer from 65536 to 67108864/)
  const error = t.throws(() => parseConfig({ TENANTS_FILE_MAX_BYTES: '1048576' })) as ConfigError
  t.equal(error.variable, 'TENANTS_FILE_MAX_BYTES')
  t.equal(error.message, 'Invalid configuration: TENANTS_FILE_MAX_BYTES is only used with TENANTS_FILE')
})

t.test('TEMPLATES_DIR: templates/ beside the tenants file unless set, holding nothing else the service reads', async (t) => {
  const root = t.testdir({ etc: { 'tenants.json': '{}', lists: { 'tor.txt': '' } }, srv: { templates: {} } })
  const tenantsFile = `${root}/etc/tenants.json`
  t.equal(parseConfig({}).templatesDir, null, 'no tenants file, no templates folder')
  t.equal(parseConfig({ TENANTS_FILE: tenantsFile }).templatesDir, `${root}/etc/templates`)
  t.equal(parseConfig({ TENANTS_FILE: tenantsFile, TEMPLATES_DIR: `${root}/srv/templates` }).templatesDir, `${root}/srv/templates`)
  const refused: Array<[Record<string, string>, RegExp]> = [
    [{ TEMPLATES_DIR: `${root}/srv/templates` }, /^Invalid configuration: TEMPLATES_DIR is only used with TENANTS_FILE$/],
    [{ TENANTS_FILE: tenantsFile, TEMPLATES_DIR: `${root}/etc` }, /^Invalid configuration: TEMPLATES_DIR .*\/etc must not be or contain the tenants file's folder \(.*\/etc\): tenants' template files get a folder of their own$/],
    [{ TENANTS_FILE: tenantsFile, TEMPLATES_DIR: root }, /TEMPLATES_DIR .* must not be or contain the tenants file's folder/],
    [{ TENANTS_FILE: tenantsFile, TEMPLATES_DIR: `${root}/etc/lists`, TOR_EXIT_LIST: `${root}/etc/lists/tor.txt` }, /TEMPLATES_DIR .*\/etc\/lists must not contain .*\/etc\/lists\/tor.txt \(TOR_EXIT_LIST\)/],
    [{ TENANTS_FILE: tenantsFile, TOR_EXIT_LIST: `${root}/etc/templates/tor.txt` }, /^Invalid configuration: TEMPLATES_DIR \(unset: templates\/ beside TENANTS_FILE\) .*\/etc\/templates must not contain .*\/etc\/templates\/tor.txt \(TOR_EXIT_LIST\)/],
    [{ TENANTS_FILE: tenantsFile, TEMPLATES_DIR: `${root}/srv`, IP_BLOCKLISTS: `https://lists.example/proxies.txt, ${root}/srv/lists/proxies.txt` }, /TEMPLATES_DIR .*\/srv must not contain .*\/srv\/lists\/proxies.txt \(IP_BLOCKLISTS\)/]
  ]
  for (const [env, message] of refused) {
    const error = t.throws(() => parseConfig(env)) as ConfigError
    t.equal(error.variable, 'TEMPLATES_DIR', JSON.stringify(env))
    t.match(error.message, message)
  }
})

t.test('MESH_IDENTITY_HEADER: one of the two headers, and only with TRUST_PROXY', async (t) => {
  t.equal(parseConfig({}).meshIdentityHeader, null)
  t.equal(parseConfig({ MESH_IDENTITY_HEADER: 'l5d-client-id', TRUST_PROXY: '127.0.0.6', MESH_GATEWAY_IDENTITIES: 'none' }).meshIdentityHeader, 'l5d-client-id')
  t.throws(() => parseConfig({ MESH_IDENTITY_HEADER: 'x-forwarded-client-cert' }), /MESH_IDENTITY_HEADER needs TRUST_PROXY/)
  t.throws(() => parseConfig({ MESH_IDENTITY_HEADER: 'x-client-id', TRUST_PROXY: '127.0.0.6' }), /MESH_IDENTITY_HEADER must be one of x-forwarded-client-cert, l5d-client-id/)
  t.equal(parseConfig({}).shutdownDrainMs, 5000, 'the drain lasts 5 s unless set')
})

t.test('MESH_GATEWAY_IDENTITIES: required with a mesh identity (none for none), identities or namespace prefixes; MESH_GATEWAY_TRUSTED_HOPS only with them', async (t) => {
  const mesh = { MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', TRUST_PROXY: '127.0.0.6' }
  const gateway = 'spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account'
  t.equal(parseConfig({}).meshGateways, null)
  t.equal(parseConfig({ ...mesh, MESH_GATEWAY_IDENTITIES: 'none' }).meshGateways, null, 'none: only internal workloads')
  t.same(parseConfig({ ...mesh, MESH_GATEWAY_IDENTITIES: gateway }).meshGateways, { identities: [gateway], trustedHops: 0 }, 'no proxy in front of the gateway unless said')
  t.same(parseConfig({ ...mesh, MESH_GATEWAY_IDENTITIES: ` ${gateway}, spiffe://cluster.local/ns/edge/sa/*,`, MESH_GATEWAY_TRUSTED_HOPS: '2' }).meshGateways,
    { identities: [gateway, 'spiffe://cluster.local/ns/edge/sa/*'], trustedHops: 2 })
  t.same(parseConfig({ MESH_IDENTITY_HEADER: 'l5d-client-id', TRUST_PROXY: '127.0.0.1', MESH_GATEWAY_IDENTITIES: 'ingress-nginx.ingress-nginx.serviceaccount.identity.linkerd.cluster.local' }).meshGateways?.identities,
    ['ingress-nginx.ingress-nginx.serviceaccount.identity.linkerd.cluster.local'])
  const linkerd = { MESH_IDENTITY_HEADER: 'l5d-client-id', TRUST_PROXY: '127.0.0.1' }
  const SPIFFE = /that is not a SPIFFE ID \(spiffe:\/\/<trust domain>\/<path>/
  const refused: Array<[Record<string, string>, string, RegExp]> = [
    [mesh, 'MESH_GATEWAY_IDENTITIES', /is required with MESH_IDENTITY_HEADER: .* or none when only internal workloads call the service/],
    [{ MESH_GATEWAY_IDENTITIES: gateway }, 'MESH_GATEWAY_IDENTITIES', /is only used with MESH_IDENTITY_HEADER/],
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: ',' }, 'MESH_GATEWAY_IDENTITIES', /names no identity/],
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: `none,${gateway}` }, 'MESH_GATEWAY_IDENTITIES', /none stands alone/],
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/ns/*/sa/gateway' }, 'MESH_GATEWAY_IDENTITIES', /has an entry "spiffe:\/\/cluster.local\/ns\/\*\/sa\/gateway" that is not a SPIFFE ID/],
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/ns/a b' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE],
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: `spiffe://td/${'a'.repeat(2048)}` }, 'MESH_GATEWAY_IDENTITIES', SPIFFE],
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: '*' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a lone wildcard
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'istio-ingressgateway-service-account' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a service account name alone
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: `${gateway},istio-system/sa/gateway` }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // one bad entry beside a good one
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'https://cluster.local/ns/istio-system/sa/gateway' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // another scheme
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'SPIFFE://cluster.local/ns/istio-system/sa/gateway' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // the scheme in upper case
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://Cluster.Local/ns/istio-system/sa/gateway' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // the trust domain in upper case
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a trust domain without a path
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a trailing slash
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/ns//sa/gateway' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // an empty segment
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/ns/../sa/gateway' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a dot segment
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/ns/istio%2Dsystem/sa/gateway' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // percent-encoding
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://user@cluster.local/ns/a/sa/b' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // userinfo
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local:443/ns/a/sa/b' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a port
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/ns/a/sa/b?x=1' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a query
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/*' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a prefix of the whole trust domain
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/ns/a/sa/*/*' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // two wildcards
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'ingress-nginx.ingress-nginx.serviceaccount.identity.linkerd.cluster.local' }, 'MESH_GATEWAY_IDENTITIES', SPIFFE], // a Linkerd identity where XFCC is read
    [{ ...linkerd, MESH_GATEWAY_IDENTITIES: 'spiffe://cluster.local/ns/a/sa/b' }, 'MESH_GATEWAY_IDENTITIES', /that is not a Linkerd identity/], // a SPIFFE ID where l5d-client-id is read
    [{ ...linkerd, MESH_GATEWAY_IDENTITIES: 'ingress-nginx.ingress-nginx.serviceaccount.identity.linkerd.cluster.local/*' }, 'MESH_GATEWAY_IDENTITIES', /that is not a Linkerd identity/], // a prefix
    [{ ...linkerd, MESH_GATEWAY_IDENTITIES: 'Ingress.ingress-nginx.serviceaccount.identity.linkerd.cluster.local' }, 'MESH_GATEWAY_IDENTITIES', /that is not a Linkerd identity/], // upper case
    [{ ...linkerd, MESH_GATEWAY_IDENTITIES: 'ingress-nginx.serviceaccount.identity.linkerd.cluster.local' }, 'MESH_GATEWAY_IDENTITIES', /that is not a Linkerd identity/], // no namespace
    [{ ...linkerd, MESH_GATEWAY_IDENTITIES: 'ingress-nginx.ingress-nginx.linkerd.cluster.local' }, 'MESH_GATEWAY_IDENTITIES', /that is not a Linkerd identity/], // not an identity name
    [{ ...linkerd, MESH_GATEWAY_IDENTITIES: 'ingress-nginx.ingress-nginx.serviceaccount.identity.linkerd' }, 'MESH_GATEWAY_IDENTITIES', /that is not a Linkerd identity/], // no trust domain
    ...['1.5', '1e1', '0x1', '2 hops', '+1'].map((hops): [Record<string, string>, string, RegExp] => [{ ...mesh, MESH_GATEWAY_IDENTITIES: gateway, MESH_GATEWAY_TRUSTED_HOPS: hops }, 'MESH_GATEWAY_TRUSTED_HOPS', /must be an integer from 0 to 15 \(got "/]),
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: 'none', MESH_GATEWAY_TRUSTED_HOPS: '1' }, 'MESH_GATEWAY_TRUSTED_HOPS', /is only used with MESH_GATEWAY_IDENTITIES/],
    [{ MESH_GATEWAY_TRUSTED_HOPS: '1' }, 'MESH_GATEWAY_TRUSTED_HOPS', /is only used with MESH_GATEWAY_IDENTITIES/],
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: gateway, MESH_GATEWAY_TRUSTED_HOPS: '16' }, 'MESH_GATEWAY_TRUSTED_HOPS', /must be an integer from 0 to 15 \(got 16\)/],
    [{ ...mesh, MESH_GATEWAY_IDENTITIES: gateway, MESH_GATEWAY_TRUSTED_HOPS: '-1' }, 'MESH_GATEWAY_TRUSTED_HOPS', /must be an integer from 0 to 15 \(got -1\)/]
  ]
  for (const [env, variable, message] of refused) {
    const error = t.throws(() => parseConfig(env)) as ConfigError
    t.equal(error.variable, variable, JSON.stringify(env))
    t.match(error.message, message)
    t.notMatch(error.message, /\n/, 'one line')
  }
  t.same(parseConfig({ ...mesh, MESH_GATEWAY_IDENTITIES: 'spiffe://prod.example-corp.com/ns/edge_1/sa/gate.way-2', MESH_GATEWAY_TRUSTED_HOPS: '015' }).meshGateways,
    { identities: ['spiffe://prod.example-corp.com/ns/edge_1/sa/gate.way-2'], trustedHops: 15 }, 'the SPIFFE alphabet, and leading zeros are digits still')
})

t.test('every secret also as <NAME>_FILE: read, trimmed, never both, never echoed', async (t) => {
  const dir = t.testdir({
    hmac: `k1:${Buffer.alloc(32, 7).toString('base64')}\n`,
    token: '  metrics-token-from-a-file-0123  \n',
    'redis-url': 'redis://:hunter2@redis.internal:6379\n',
    empty: '\n'
  })
  const config = parseConfig({ OTP_HMAC_KEYS_FILE: `${dir}/hmac`, METRICS_TOKEN_FILE: `${dir}/token`, REDIS_URL_FILE: `${dir}/redis-url` })
  t.same(config.hmacKeys.map((key) => key.id), ['k1'])
  t.equal(config.hmacKeys[0]?.secret.equals(Buffer.alloc(32, 7)), true, 'the key as written, final newline dropped')
  t.equal(config.metricsToken, 'metrics-token-from-a-file-0123')
  t.equal(config.redisUrl, 'redis://:hunter2@redis.internal:6379')
  t.equal(parseRedisToolConfig({ REDIS_URL_FILE: `${dir}/redis-url` }).redis?.kind, 'single', 'the tools read them too')

  t.throws(() => parseConfig({ METRICS_TOKEN: 'metrics-token-in-the-env-0123', METRICS_TOKEN_FILE: `${dir}/token` }), /^Invalid configuration: METRICS_TOKEN_FILE cannot be combined with METRICS_TOKEN: set one of them$/, 'both set')
  t.throws(() => parseConfig({ SMTP_URL_FILE: `${dir}/absent` }), /SMTP_URL_FILE cannot be read: ENOENT/)
  t.throws(() => parseConfig({ REDIS_PASSWORD_FILE: `${dir}/empty` }), /REDIS_PASSWORD_FILE names an empty file/)
  const error = (() => { try { parseConfig({ REDIS_URL_FILE: `${dir}/hmac` }) } catch (caught) { return caught as Error } })()
  t.match(error?.message, /REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL$/, 'a bad value from a file is refused like one from the environment')
  t.notMatch(error?.message, /k1:/, 'without echoing it')
})

t.test('OTP_HMAC_SIGNING_KEY and RECEIPT_SIGNING_KEY choose the signing key among those listed', async (t) => {
  const keys = `a:${Buffer.alloc(32, 1).toString('base64')},b:${Buffer.alloc(32, 2).toString('base64')}`
  const tagKey = { RECIPIENT_TAG_KEY: Buffer.alloc(32, 1).toString('base64') }
  t.same(parseConfig({ OTP_HMAC_KEYS: keys, ...tagKey }).hmacKeys.map((key) => key.id), ['a', 'b'], 'the first signs unless told')
  t.same(parseConfig({ OTP_HMAC_KEYS: keys, OTP_HMAC_SIGNING_KEY: 'b', ...tagKey }).hmacKeys.map((key) => key.id), ['b', 'a'])
  t.throws(() => parseConfig({ OTP_HMAC_KEYS: keys, OTP_HMAC_SIGNING_KEY: 'c', ...tagKey }), /OTP_HMAC_SIGNING_KEY names no key of OTP_HMAC_KEYS \(got "c"; ids: a, b\)/)
  t.throws(() => parseConfig({ OTP_HMAC_SIGNING_KEY: 'a' }), /OTP_HMAC_SIGNING_KEY is only used with OTP_HMAC_KEYS/)
  t.throws(() => parseConfig({ OTP_HMAC_KEYS: keys, RECEIPT_SIGNING_KEY: 'a', ...tagKey }), /RECEIPT_SIGNING_KEY is only used with RECEIPT_SIGNING_KEYS/)
})

t.test('RECIPIENT_TAG_KEY: a key of its own; unset, the only HMAC key\'s secret; required once OTP_HMAC_KEYS lists several', async (t) => {
  const [one, two, tag] = [1, 2, 9].map((fill) => Buffer.alloc(32, fill))
  const keys = `a:${one?.toString('base64')},b:${two?.toString('base64')}`
  const set = parseConfig({ OTP_HMAC_KEYS: keys, OTP_HMAC_SIGNING_KEY: 'b', RECIPIENT_TAG_KEY: tag?.toString('base64') })
  t.same([set.recipientTagKey.secret.equals(tag as Buffer), set.recipientTagKey.borrowedFrom], [true, null], 'set: its own key, whichever HMAC key signs')

  const borrowed = parseConfig({ OTP_HMAC_KEYS: `a:${one?.toString('base64')}` })
  t.same([borrowed.recipientTagKey.secret.equals(one as Buffer), borrowed.recipientTagKey.borrowedFrom], [true, 'a'], 'unset with one HMAC key: that key\'s secret, the key recipients were tagged with before')

  const embedded = parseConfig({})
  t.same([embedded.recipientTagKey.secret.length, embedded.recipientTagKey.borrowedFrom], [32, null], 'the embedded default starts with nothing set')

  const required = t.throws(() => parseConfig({ OTP_HMAC_KEYS: keys, OTP_HMAC_SIGNING_KEY: 'a' })) as ConfigError
  t.equal(required.variable, 'RECIPIENT_TAG_KEY', 'with two HMAC keys: which one would depend on the phase of the rotation')
  t.match(required.message, /RECIPIENT_TAG_KEY is required when OTP_HMAC_KEYS lists more than one key \(ids: a, b\): set it to the secret of the key that signed before the rotation began/)
  t.notMatch(required.message, /\n/, 'one line')

  const short = t.throws(() => parseConfig({ RECIPIENT_TAG_KEY: 'c2hvcnQtc2VjcmV0' })) as ConfigError
  t.same([short.variable, short.message], ['RECIPIENT_TAG_KEY', 'Invalid configuration: RECIPIENT_TAG_KEY must be base64 of at least 32 bytes (openssl rand -base64 32)'], 'too short, and not echoed')
  t.throws(() => parseConfig({ RECIPIENT_TAG_KEY: `${tag?.toString('base64')}!` }), /RECIPIENT_TAG_KEY must be base64/, 'not base64')

  const dir = t.testdir({ tag: `${tag?.toString('base64')}\n` })
  const fromFile = parseConfig({ OTP_HMAC_KEYS: keys, RECIPIENT_TAG_KEY_FILE: `${dir}/tag` })
  t.ok(fromFile.recipientTagKey.secret.equals(tag as Buffer), 'RECIPIENT_TAG_KEY_FILE, like every secret')
})

t.test('SNS_SIGNING_CERT_URL_PATTERN matches the whole URL; the default only SNS\'s own hosts', async (t) => {
  const pattern = (value?: string): RegExp => parseConfig(value === undefined ? {} : { SNS_SIGNING_CERT_URL_PATTERN: value }).sesFeedback.certUrlPattern
  for (const url of [
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem',
    'https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-abc.pem',
    'https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem'
  ]) t.ok(pattern().test(url), url)
  for (const url of [
    'https://sns.s3.amazonaws.com/SimpleNotificationService-abc.pem',
    'https://sns.s3-us-west-2.amazonaws.com/SimpleNotificationService-abc.pem',
    'https://sns.us-east-1.amazonaws.com.evil.example/SimpleNotificationService-abc.pem',
    'https://sns.us-east-1.amazonaws.com:8443/SimpleNotificationService-abc.pem'
  ]) t.notOk(pattern().test(url), url)
  const unanchored = pattern('https://certs\\.internal\\.example/[a-z]+\\.pem')
  t.ok(unanchored.test('https://certs.internal.example/a.pem'))
  t.notOk(unanchored.test('https://evil.example/?https://certs.internal.example/a.pem'), 'a pattern without ^ still matches from the start')
  t.notOk(unanchored.test('https://certs.internal.example/a.pem.evil.example/b.pem'), 'and without $ to the end')
  t.notOk(pattern('^https://a\\.example/x\\.pem$|evil').test('https://evil.example/x.pem'), 'an alternative is anchored too')
  t.equal((t.throws(() => parseConfig({ SNS_SIGNING_CERT_URL_PATTERN: '(' })) as ConfigError).variable, 'SNS_SIGNING_CERT_URL_PATTERN')
})

t.test('every pattern of the environment says what it asks for in words, beside the regex', async (t) => {
  for (const [name, value] of Object.entries(EnvSchema.properties)) {
    const schema = value as { pattern?: string, patternRule?: string, patternWords?: string, durationMinimum?: string }
    // A duration's words come from its bounds.
    if (schema.pattern === undefined || schema.durationMinimum !== undefined) continue
    t.match(schema.patternRule, /^must be /, `${name}: the rule its error line ends with`)
    t.type(schema.patternWords, 'string', `${name}: the words of the configuration table`)
  }
  const refused = t.throws(() => parseConfig({ OTEL_TRACES_SAMPLER_ARG: '2' })) as ConfigError
  t.equal(refused.message, 'Invalid configuration: OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1 (e.g. 0.01) (got "2")')
  t.equal((t.throws(() => parseConfig({ RECIPIENT_TAG_KEY_ACCEPT: 'short' })) as ConfigError).message, 'Invalid configuration: RECIPIENT_TAG_KEY_ACCEPT must be the 16-character fingerprint the refusal line printed (got "short")')
})
