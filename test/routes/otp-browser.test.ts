import t from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'

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
    t.same([other.status, other.body.code], [400, 'CODE_MISMATCH'], 'a real user elsewhere is not: made-up requestIds never reach the key\'s bucket')
  })
})

/*
 * Junk costs the service nothing (a verify of a made-up requestId sends no mail and touches no
 * code; a malformed dispatch is refused before admission), so it counts only against the
 * sender's own source, never against the key's bucket every browser user of the partner needs.
 * With the default limits (30 a minute per source, 600 per key) 40 sources used to be twice
 * enough to fill that bucket for the rest of the minute. The test keeps those counts over an
 * hour's windows: a window starts at its first hit, and on a busy machine the 1240 requests can
 * take longer than a minute, when a source's 31st would open a new window instead of meeting
 * its limit.
 */
for (const store of ['memory', 'redis'] as const) {
  t.test(`junk from 40 sources, each up to its own limit, leaves a public key's bucket to its users (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const redis = store === 'redis' ? await startRedis() : null
    t.teardown(async () => { await redis?.stop() })
    const { path, keys } = writeTenants(t)
    const defaults = { RATE_LIMIT_SOURCE: '30/1h', RATE_LIMIT_KEY: '600/1h', RATE_LIMIT_RECIPIENT: '5/15m' }
    const { app, mail } = await buildApp(t, { TENANTS_FILE: path, ...defaults, ...(redis === null ? {} : { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }) })
    const port = await listenApp(app)
    const call = async (path: string, body: unknown, localAddress: string) => await send({
      port, localAddress, path, headers: { ...json, ...bearer(keys.acmeBrowser), ...page }, body: JSON.stringify(body)
    })
    const sources = Array.from({ length: 40 }, (_, i) => `127.0.1.${i + 1}`)
    const answers = await Promise.all(sources.map(async (source, i) => {
      const statuses: number[] = []
      // Its own limit and one more: half made-up requestIds, half refused dispatches.
      for (let n = 0; n < 31; n++) {
        const junk = n % 2 === 0
          ? await call('/otp/verify', { requestId: `otp_made_up_${i}_${n}`, userGuess: '123456' }, source)
          : await call('/otp/request', { email: 'not an address' }, source)
        statuses.push(junk.status)
      }
      return statuses
    }))
    const sent = answers.flat()
    t.equal(sent.length, 1240, 'more junk than the key\'s bucket holds, twice over')
    t.equal(sent.filter((status) => status === 400).length, 1200, 'each source\'s first 30 are answered 400')
    t.equal(sent.filter((status) => status === 429).length, 40, 'each source\'s 31st meets its own limit')

    const user = '127.0.2.1'
    const dispatched = await call('/otp/request', { email: 'real.user@example.com' }, user)
    t.equal(dispatched.status, 200, 'a real user\'s dispatch through the same key is admitted')
    const verified = await call('/otp/verify', { requestId: dispatched.body.data.requestId, userGuess: mail.codeFor('real.user@example.com') }, user)
    t.equal(verified.status, 200, 'and its verify')
    if (redis !== null) {
      const client = await connectFailFast(redis.url)
      t.teardown(() => { client.disconnect() })
      t.equal(await client.get('rl:k:{acme:live}:acme_browser'), '2', 'the key\'s bucket holds the real user\'s two requests and nothing of the junk')
    }
  })
}
