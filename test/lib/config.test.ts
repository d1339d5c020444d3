import t from 'tap'
import { ConfigError, parseConfig } from '../../lib/config.js'
import { TEST_HMAC_KEYS } from '../helper.js'

t.test('defaults give the embedded service', async (t) => {
  const config = parseConfig({})
  t.equal(config.port, 3000)
  t.equal(config.host, '127.0.0.1')
  t.equal(config.redisUrl, null)
  t.equal(config.otpTtlSeconds, 600)
  t.equal(config.bodyLimitBytes, 4096)
  t.equal(config.mailTransport, 'log')
  t.equal(config.hmacKeyGenerated, true)
  t.equal(config.hmacKeys[0]?.secret.length, 32)
  t.same(config.trustProxy, [])
})

t.test('values are converted and checked', async (t) => {
  const config = parseConfig({ PORT: '8080', OTP_TTL_SECONDS: '300', TRUST_PROXY: '10.0.0.0/8, ::1', OTP_HMAC_KEYS: TEST_HMAC_KEYS + ',old:' + Buffer.alloc(40, 1).toString('base64'), LOG_LEVEL: '' })
  t.equal(config.port, 8080)
  t.equal(config.otpTtlSeconds, 300)
  t.same(config.trustProxy, ['10.0.0.0/8', '::1'])
  t.same(config.hmacKeys.map((key) => key.id), ['k1', 'old'])
  t.equal(config.logLevel, 'info', 'an empty variable means unset')
})

t.test('a bad value stops start-up with one line naming the variable', async (t) => {
  const cases: Array<[Record<string, string>, string, RegExp]> = [
    [{ PORT: 'abc' }, 'PORT', /^Invalid configuration: PORT must be an integer from 0 to 65535 \(got "abc"\)$/],
    [{ PORT: '70000' }, 'PORT', /PORT must be an integer/],
    [{ OTP_TTL_SECONDS: '0' }, 'OTP_TTL_SECONDS', /OTP_TTL_SECONDS must be an integer/],
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
  const { EnvSchema } = await import('../../schemas/env.js')
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
  const { EnvSchema } = await import('../../schemas/env.js')
  const readme = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8')
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
