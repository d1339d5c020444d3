import t from 'tap'
import { buildApp, readiness, TEST_HMAC_KEYS } from '../helper.js'
import { until } from '../support/wait.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
import { refusedStart } from '../support/service-process.js'

/*
 * Suppressions, lockouts and recipient counts are kept under tags keyed by the recipient tag
 * key. Replacing the only OTP_HMAC_KEYS key in one step (no RECIPIENT_TAG_KEY) used to change
 * that key silently, lifting every suppression. Redis keeps the key's fingerprint (an HMAC of a
 * fixed label, nothing the key can be derived from): an instance with another key is refused at
 * start, with the fingerprint to accept the change deliberately.
 */

const OTHER_SECRET = Buffer.alloc(32, 9).toString('base64')
const FIRST_SECRET = TEST_HMAC_KEYS.slice(TEST_HMAC_KEYS.indexOf(':') + 1)

t.test('a tag key other than the one Redis\'s data was written under is refused; the documented ways through start', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(redis.stop)
  const admin = await connectFailFast(redis.url)
  t.teardown(() => { admin.disconnect() })

  await (await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })).app.close()
  const stored = await admin.get('recipient-tag:fingerprint')
  t.match(stored, /^[A-Za-z0-9_-]{16}$/, 'the first start records the fingerprint')
  t.equal(await admin.pttl('recipient-tag:fingerprint'), -1, 'kept as long as the data it guards')
  t.notOk(stored !== null && Buffer.from(FIRST_SECRET, 'base64').toString('base64url').includes(stored), 'not a piece of the key')

  // The key replaced in one step: refused, one line, with the way to accept it.
  const replaced = { REDIS_URL: redis.url, OTP_HMAC_KEYS: `k2:${OTHER_SECRET}`, PORT: '0' }
  const { exitCode, stderr } = await refusedStart(replaced)
  t.equal(exitCode, 1)
  const lines = stderr.split('\n').filter((line) => line.startsWith('email-otp: '))
  t.equal(lines.length, 1)
  const accept = /RECIPIENT_TAG_KEY_ACCEPT=([A-Za-z0-9_-]{16})/.exec(lines[0] ?? '')?.[1]
  t.match(lines[0], new RegExp(`^email-otp: Invalid configuration: RECIPIENT_TAG_KEY is not the key this Redis's suppressions, lockouts and recipient counts were written under \\(fingerprint ${stored ?? ''}; `))
  t.ok(accept !== undefined && accept !== stored)
  t.equal(await admin.get('recipient-tag:fingerprint'), stored, 'a refused start changes nothing')

  // The rotation the docs prescribe: the new signing key, the old secret as RECIPIENT_TAG_KEY.
  await (await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: `k2:${OTHER_SECRET}`, RECIPIENT_TAG_KEY: FIRST_SECRET })).app.close()
  t.equal(await admin.get('recipient-tag:fingerprint'), stored, 'the same tag key: nothing to accept')

  // A fingerprint of some other key accepts nothing.
  await t.rejects(buildApp(t, { ...replaced, RECIPIENT_TAG_KEY_ACCEPT: stored ?? '' }), { name: 'ConfigError', variable: 'RECIPIENT_TAG_KEY' })
  // Accepted deliberately: starts, and the new key is the one kept.
  await (await buildApp(t, { ...replaced, RECIPIENT_TAG_KEY_ACCEPT: accept ?? '' })).app.close()
  t.equal(await admin.get('recipient-tag:fingerprint'), accept)
  await (await buildApp(t, replaced)).app.close()
  await t.rejects(buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }), { name: 'ConfigError', variable: 'RECIPIENT_TAG_KEY' }, 'and now the old key is the stranger')
})

t.test('an instance still running the old key leaves service once another accepts a new one', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(redis.stop)
  const old = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  await until('the old instance ready', async () => (await readiness(old.app)).status === 200)
  const admin = await connectFailFast(redis.url)
  t.teardown(() => { admin.disconnect() })
  const replaced = { REDIS_URL: redis.url, OTP_HMAC_KEYS: `k2:${OTHER_SECRET}` }
  const refusal = await buildApp(t, replaced).then(() => '', (error: unknown) => String(error))
  const accept = /RECIPIENT_TAG_KEY_ACCEPT=([A-Za-z0-9_-]{16})/.exec(refusal)?.[1] ?? ''
  t.not(accept, '', 'the new key is refused at start, with the fingerprint to accept')
  const renewed = await buildApp(t, { ...replaced, RECIPIENT_TAG_KEY_ACCEPT: accept })
  t.equal(await admin.get('recipient-tag:fingerprint'), accept, 'the new key is the one kept')
  // Within a readiness check or two, not only at its next start.
  await until('the old instance not ready', async () => (await readiness(old.app)).status === 503)
  const standing = await readiness(old.app)
  t.match(standing.body.checks.tokenStore.reason, /^RECIPIENT_TAG_KEY is not the key this Redis's suppressions/, 'for the tag key')
  t.equal(old.logs.lines.filter((line) => line.includes('RECIPIENT_TAG_KEY is not the key')).length, 1, 'logged once')
  t.equal((await readiness(renewed.app)).status, 200, 'the instance with the accepted key stays ready')
})

t.test('RECIPIENT_TAG_KEY_ACCEPT without Redis is refused: nothing to compare with', async (t) => {
  await t.rejects(buildApp(t, { RECIPIENT_TAG_KEY_ACCEPT: 'AAAAAAAAAAAAAAAA' }), { name: 'ConfigError', variable: 'RECIPIENT_TAG_KEY_ACCEPT' })
})
