import { createHash } from 'node:crypto'
import { mock } from 'node:test'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants, type TestApp } from '../helper.js'
import { tokenKey } from '../../lib/state/redis/keys.js'
import { redisTestOptions, startRedis, type RedisServer } from '../support/redis.js'
import { until } from '../support/wait.js'

interface Backend {
  name: string
  env: () => Record<string, string>
  /** On Redis, codes expire on Redis's own clock; in memory, on the service's, which a test can drive. */
  redis?: Redis
}

async function dispatch (app: TestApp['app'], key: string, email: string, headers: Record<string, string> = {}) {
  return await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(key), ...headers }, payload: { email } })
}

async function verify (app: TestApp['app'], key: string, requestId: string, userGuess: string) {
  return await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(key), payload: { requestId, userGuess } })
}

function wrong (code: string): string {
  return String((Number(code) + 1) % 1_000_000).padStart(6, '0')
}

const MISMATCH = { success: false, message: 'The code is incorrect, expired or already used', code: 'CODE_MISMATCH' }

function otpSuite (t: Test, backend: Backend): void {
  t.test('dispatch, read the code, verify once', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...backend.env(), TENANTS_FILE: path })
    const sent = await dispatch(app, keys.acmeLive, 'ada@example.com')
    t.equal(sent.statusCode, 200)
    const body = sent.json()
    t.equal(body.success, true)
    t.equal(body.message, 'Verification code sent')
    t.match(body.data.requestId, /^otp_[A-Za-z0-9_-]{22}$/)
    t.equal(sent.headers['cache-control'], 'no-store')

    const code = mail.codeFor('ada@example.com')
    const ok = await verify(app, keys.acmeLive, body.data.requestId, code)
    t.equal(ok.statusCode, 200)
    t.match(ok.json(), { success: true, message: 'Code verified', data: { receipt: /^[\w-]+\.[\w-]+\.[\w-]+$/ } })

    const replay = await verify(app, keys.acmeLive, body.data.requestId, code)
    t.equal(replay.statusCode, 400)
    t.same(replay.json(), MISMATCH, 'a replay looks exactly like a wrong code')
  })

  t.test('a wrong guess consumes the code', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...backend.env(), TENANTS_FILE: path })
    const { requestId } = (await dispatch(app, keys.acmeLive, 'bob@example.com')).json().data
    const code = mail.codeFor('bob@example.com')
    const miss = await verify(app, keys.acmeLive, requestId, wrong(code))
    t.equal(miss.statusCode, 400)
    t.same(miss.json(), MISMATCH)
    const late = await verify(app, keys.acmeLive, requestId, code)
    t.same([late.statusCode, late.json()], [400, MISMATCH], 'the right code after a wrong one fails too')
  })

  t.test('unknown requestIds answer exactly like wrong codes', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app } = await buildApp(t, { ...backend.env(), TENANTS_FILE: path })
    const unknown = await verify(app, keys.acmeLive, 'otp_doesnotexistdoesnotexist', '123456')
    t.same([unknown.statusCode, unknown.json()], [400, MISMATCH])
  })

  t.test('the guess is trimmed; a malformed guess still consumes the code', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...backend.env(), TENANTS_FILE: path })
    const first = (await dispatch(app, keys.acmeLive, 'cy@example.com')).json().data.requestId
    const trimmed = await verify(app, keys.acmeLive, first, `  ${mail.codeFor('cy@example.com')}\n\t`)
    t.equal(trimmed.statusCode, 200, 'surrounding whitespace is ignored')

    const second = (await dispatch(app, keys.acmeLive, 'cy@example.com')).json().data.requestId
    const code = mail.codeFor('cy@example.com')
    for (const malformed of ['12345', '1234567', 'abcdef', '12 345', '１２３４５６']) {
      const answer = await verify(app, keys.acmeLive, 'otp_unknownunknownunknown0', malformed)
      t.equal(answer.json().code, 'INVALID_CODE_FORMAT', `${JSON.stringify(malformed)} is not 6 ASCII digits`)
    }
    const malformed = await verify(app, keys.acmeLive, second, code.slice(0, 5))
    t.equal(malformed.statusCode, 400)
    t.equal(malformed.json().code, 'INVALID_CODE_FORMAT')
    const after = await verify(app, keys.acmeLive, second, code)
    t.same([after.statusCode, after.json()], [400, MISMATCH], 'the malformed attempt used the code up')
  })

  t.test('an expired code verifies like a wrong one', async (t) => {
    const redis = backend.redis
    // The service's clock is the test's (node:test's MockTimers, Date only), from before the
    // stores are built: it stands still until the test moves it.
    if (redis === undefined) {
      mock.timers.enable({ apis: ['Date'], now: Date.now() })
      t.teardown(() => { mock.timers.reset() })
    }
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...backend.env(), TENANTS_FILE: path, OTP_TTL_SECONDS: '1' })
    const { requestId } = (await dispatch(app, keys.acmeLive, 'dee@example.com')).json().data
    const code = mail.codeFor('dee@example.com')
    if (redis === undefined) {
      const { requestId: early } = (await dispatch(app, keys.acmeLive, 'dee.early@example.com')).json().data
      mock.timers.tick(999)
      t.equal((await verify(app, keys.acmeLive, early, mail.codeFor('dee.early@example.com'))).statusCode, 200, 'a millisecond before OTP_TTL_SECONDS, a code of the same moment still verifies')
      mock.timers.tick(1)
    } else {
      await until('the code to expire in Redis', async () => await redis.exists(tokenKey('acme', 'live', requestId)) === 0)
    }
    const late = await verify(app, keys.acmeLive, requestId, code)
    t.same([late.statusCode, late.json()], [400, MISMATCH])
  })

  t.test('another tenant or another mode can neither verify nor consume a code', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...backend.env(), TENANTS_FILE: path })
    const { requestId } = (await dispatch(app, keys.acmeTest, 'eve@example.com')).json().data
    const code = mail.codeFor('eve@example.com')
    const foreign = await verify(app, keys.globexTest, requestId, code)
    t.same([foreign.statusCode, foreign.json()], [400, MISMATCH], 'other tenant')
    const otherMode = await verify(app, keys.acmeLive, requestId, code)
    t.same([otherMode.statusCode, otherMode.json()], [400, MISMATCH], 'same tenant, live key')
    const owner = await verify(app, keys.acmeTest, requestId, code)
    t.equal(owner.statusCode, 200, 'the foreign attempts did not consume the code')
  })

  t.test('of 20 concurrent right guesses exactly one succeeds', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...backend.env(), TENANTS_FILE: path })
    const { requestId } = (await dispatch(app, keys.acmeLive, 'fay@example.com')).json().data
    const code = mail.codeFor('fay@example.com')
    const answers = await Promise.all(Array.from({ length: 20 }, async () => await verify(app, keys.acmeLive, requestId, code)))
    t.equal(answers.filter((answer) => answer.statusCode === 200).length, 1)
    t.equal(answers.filter((answer) => answer.statusCode === 400).length, 19)
  })

  t.test('a second dispatch issues an independent code', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...backend.env(), TENANTS_FILE: path })
    const first = (await dispatch(app, keys.acmeLive, 'gus@example.com')).json().data.requestId
    const firstCode = mail.codeFor('gus@example.com')
    const second = (await dispatch(app, keys.acmeLive, 'gus@example.com')).json().data.requestId
    const secondCode = mail.codeFor('gus@example.com')
    t.not(first, second)
    t.equal((await verify(app, keys.acmeLive, first, firstCode)).statusCode, 200, 'the earlier code stays valid')
    t.equal((await verify(app, keys.acmeLive, second, secondCode)).statusCode, 200)
  })
}

t.test('memory store', async (t) => {
  otpSuite(t, { name: 'memory', env: () => ({}) })
})

t.test('redis store', redisTestOptions(), async (t) => {
  const redis: RedisServer = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const env = (): Record<string, string> => ({ REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  // Counters (limits, lockout, quota) would otherwise carry over between tests.
  t.beforeEach(async () => { await client.flushall() })
  otpSuite(t, { name: 'redis', env, redis: client })

  t.test('neither the code nor an unkeyed hash of it is stored', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    for (let i = 0; i < 5; i++) await dispatch(app, keys.acmeLive, `hal${i}@example.com`)
    const codes = Array.from({ length: 5 }, (_, i) => mail.codeFor(`hal${i}@example.com`))
    const forbidden = codes.flatMap((code) => [
      code,
      createHash('sha256').update(code).digest('hex'),
      createHash('sha256').update(code).digest('base64'),
      createHash('sha256').update(code).digest('base64url')
    ])
    const everything = await client.keys('*')
    for (const key of everything) {
      const type = await client.type(key)
      const value = type === 'string' ? (await client.get(key)) ?? '' : (await client.dumpBuffer(key))?.toString('latin1') ?? ''
      for (const needle of forbidden) {
        t.notOk(key.includes(needle) || value.includes(needle), `no ${needle.length === 6 ? 'code' : 'hash'} in ${key}`)
      }
      // The recipient tag key's fingerprint is kept for as long as the data it guards (docs/backends.md).
      if (key === 'recipient-tag:fingerprint') t.equal(await client.pttl(key), -1, `${key} is kept`)
      else t.ok(await client.pttl(key) > 0, `${key} expires`)
    }
    const tokens = await client.keys('otp:*')
    t.equal(tokens.length, 5)
    for (const key of tokens) {
      t.match(await client.get(key), /^k1\.[A-Za-z0-9_-]{22}\|[A-Za-z0-9_-]{16}\|[A-Za-z0-9_-]{22}$/, 'only a key id, a keyed MAC, a recipient tag and an address hash')
    }
  })
})
