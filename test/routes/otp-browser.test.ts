import t from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

const json = { 'content-type': 'application/json' }
const page = { origin: 'https://app.acme.test' }

t.test('what a public (restricted) key lets a stranger do', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t, (file) => { file.tiers.standard = { allowance: 20, window: '1d', sandboxAllowance: 10 } })
  const { app } = await buildApp(t, {
    TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, RATE_LIMIT_SOURCE: '5/1m', RATE_LIMIT_KEY: '20/1m', RATE_LIMIT_RECIPIENT: '5/15m'
  })
  const port = await listenApp(app)
  const call = async (key: string, path: string, body: unknown, localAddress: string, headers: Record<string, string> = {}) => await send({
    port, localAddress, path, headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify(body)
  })

  t.test('its answers tell nothing of other callers or of the tenant\'s billing', async (t) => {
    for (let i = 0; i < 2; i++) t.equal((await call(keys.acmeLive, '/otp/request', { email: 'ada@example.com' }, '127.0.0.50')).status, 200)
    const fromPage = await call(keys.acmeBrowser, '/otp/request', { email: 'ada@example.com' }, '127.0.0.51', page)
    t.equal(fromPage.status, 200)
    t.equal(fromPage.headers['ratelimit-limit'], '5', 'RateLimit-* describe the page\'s own source bucket')
    t.equal(fromPage.headers['ratelimit-remaining'], '4', 'not the recipient\'s, which two earlier requests used')
    t.same(Object.keys(fromPage.headers).filter((name) => name.startsWith('quota-')), [], 'no Quota-* headers')
    const backend = await call(keys.acmeLive, '/otp/request', { email: 'bob@example.com' }, '127.0.0.50')
    t.ok(backend.headers['quota-remaining'] !== undefined, 'the backend still gets them')
  })

  t.test('it spends its own share of the allowance, never the backend\'s', async (t) => {
    // 10% of 20: two dispatches; the one above was the first.
    t.equal((await call(keys.acmeBrowser, '/otp/request', { email: 'carol@example.com' }, '127.0.0.52', page)).status, 200)
    const refused = await call(keys.acmeBrowser, '/otp/request', { email: 'dan@example.com' }, '127.0.0.53', page)
    t.same([refused.status, refused.body.code, refused.body.message], [402, 'QUOTA_EXCEEDED', 'The allowance of this key is used up'])
    t.same(Object.keys(refused.headers).filter((name) => name.startsWith('quota-')), [], 'its 402 tells nothing of the tenant\'s volume')
    const backend = await call(keys.acmeLive, '/otp/request', { email: 'erin@example.com' }, '127.0.0.50')
    t.same([backend.status, backend.headers['quota-remaining']], [200, '14'], 'the backend goes on: 20 - 4 of its own (this one included) - 2 of the page\'s')
  })

  t.test('one source cannot drain a bucket every browser user shares', async (t) => {
    const junk = { requestId: 'otp_doesnotexist0000000000', userGuess: '123456' }
    const statuses = new Set<number>()
    for (let i = 0; i < 60; i++) statuses.add((await call(keys.acmeBrowser, '/otp/verify', junk, '127.0.0.60', page)).status)
    t.same([...statuses].sort(), [400, 429], 'the flooding source is limited')
    const other = await call(keys.acmeBrowser, '/otp/verify', junk, '127.0.0.61', page)
    t.same([other.status, other.body.code], [400, 'CODE_MISMATCH'], 'a real user elsewhere is not: the key\'s bucket saw only the flood\'s first five')
  })
})
