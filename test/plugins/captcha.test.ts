import t, { type Test } from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
import { FakeSiteverify } from '../support/siteverify.js'
import type { TenantsFile } from '../../schemas/tenants.js'

const json = { 'content-type': 'application/json' }
const page = { origin: 'https://app.acme.test' }
const SECRET = '0x4AAAAAAAcaptcha-secret-for-tests'

/** Where the service keeps its state: in process, or on a real redis-server. */
interface Store {
  env: Record<string, string>
  /** Empties the store: every test uses the same tenants. */
  reset: () => Promise<void>
  /** Units charged in the quota counters themselves (Redis only). */
  charged?: () => Promise<number>
}

interface Service {
  call: (key: string, body: unknown, from: string, headers?: Record<string, string>) => ReturnType<typeof send>
  keys: ReturnType<typeof writeTenants>['keys']
  mailCount: () => number
  /** Live units charged this window, as GET /usage reports them. */
  used: () => Promise<number>
}

async function startService (t: Test, provider: FakeSiteverify, options: { store?: Store, env?: Record<string, string>, captcha?: Partial<NonNullable<TenantsFile['tenants'][number]['captcha']>> } = {}): Promise<Service> {
  const { path, keys } = writeTenants(t, (file) => {
    const acme = file.tenants[0]
    if (acme !== undefined) acme.captcha = { provider: 'turnstile', secret: SECRET, siteverifyUrl: provider.url, ...options.captcha }
  })
  // The service's default: a silent provider costs its checks this long, and a loaded machine's
  // answering provider stays far inside it (500 ms was passed at a load of 10).
  const { app, mail } = await buildApp(t, { ...options.store?.env, TENANTS_FILE: path, OTP_HMAC_KEYS: TEST_HMAC_KEYS, CAPTCHA_TIMEOUT_MS: '3000', ...options.env })
  const port = await listenApp(app)
  return {
    keys,
    mailCount: () => mail.count,
    call: async (key, body, from, headers = {}) => await send({ port, localAddress: from, path: '/otp/request', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify(body) }),
    used: async () => (await send({ port, method: 'GET', path: '/usage', headers: bearer(keys.acmeLive) })).body.data.live.used
  }
}

/** What a CAPTCHA protects, on the in-process store and on a real redis-server. */
function captchaSuite (t: Test, store: Store): void {
  t.test('a browser key whose tenant configures a CAPTCHA', async (t) => {
    await store.reset()
    const provider = await new FakeSiteverify(SECRET).start()
    t.teardown(async () => { await provider.stop() })
    const { call, keys, mailCount } = await startService(t, provider, { store })

    t.test('without a token: 403 CAPTCHA_REQUIRED, no mail, no call to the provider', async (t) => {
      const before = mailCount()
      const answer = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.70', page)
      t.same([answer.status, answer.body.code], [403, 'CAPTCHA_REQUIRED'])
      t.equal(mailCount(), before)
      t.equal(provider.calls.length, 0)
    })

    t.test('a solved challenge passes once; the provider sees the visitor\'s address', async (t) => {
      const token = provider.solve()
      const answer = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.71', { ...page, 'captcha-token': token })
      t.equal(answer.status, 200)
      t.match(answer.body.data.requestId, /^otp_/)
      t.same(provider.calls.at(-1), { response: token, remoteip: '127.0.0.71' })
      const replayed = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.71', { ...page, 'captcha-token': token })
      t.same([replayed.status, replayed.body.code], [403, 'CAPTCHA_INVALID'], 'tokens are single use')
    })

    t.test('a made-up token is refused', async (t) => {
      const answer = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.72', { ...page, 'captcha-token': 'not-a-token' })
      t.same([answer.status, answer.body.code], [403, 'CAPTCHA_INVALID'])
      const spaced = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.72', { ...page, 'captcha-token': 'a b' })
      t.same([spaced.status, spaced.body.code], [403, 'CAPTCHA_INVALID'], 'a value that cannot be a token never reaches the provider')
      t.not(provider.calls.at(-1)?.response, 'a b')
    })

    t.test('secret keys are not asked (requireFor defaults to restricted keys)', async (t) => {
      const answer = await call(keys.acmeLive, { email: 'bob@example.com' }, '127.0.0.73')
      t.equal(answer.status, 200)
    })

    t.test('an Idempotency-Key retry is answered from the first answer without a new token', async (t) => {
      const headers = { ...page, 'idempotency-key': 'signup-42' }
      const first = await call(keys.acmeBrowser, { email: 'carol@example.com' }, '127.0.0.74', { ...headers, 'captcha-token': provider.solve() })
      t.equal(first.status, 200)
      const retry = await call(keys.acmeBrowser, { email: 'carol@example.com' }, '127.0.0.74', headers)
      t.same([retry.status, retry.headers['idempotent-replayed'], retry.body.data.requestId], [200, 'true', first.body.data.requestId])
    })
  })

  t.test('requireFor all: a backend\'s dispatch is checked for its end user', async (t) => {
    await store.reset()
    const provider = await new FakeSiteverify(SECRET).start()
    t.teardown(async () => { await provider.stop() })
    const { call, keys } = await startService(t, provider, { store, captcha: { requireFor: 'all' } })
    const missing = await call(keys.acmeLive, { email: 'ada@example.com' }, '127.0.0.80')
    t.same([missing.status, missing.body.code], [403, 'CAPTCHA_REQUIRED'])
    const token = provider.solve()
    const answer = await call(keys.acmeLive, { email: 'ada@example.com' }, '127.0.0.80', { 'end-user-ip': '203.0.113.9', 'captcha-token': token })
    t.equal(answer.status, 200)
    t.same(provider.calls.at(-1), { response: token, remoteip: '203.0.113.9' }, 'the challenge was solved by the end user, not the backend')
  })

  t.test('the provider\'s hostname check', async (t) => {
    await store.reset()
    const provider = await new FakeSiteverify(SECRET).start()
    t.teardown(async () => { await provider.stop() })
    const { call, keys } = await startService(t, provider, { store, captcha: { expectedHostnames: ['app.acme.test'] } })
    const elsewhere = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.81', { ...page, 'captcha-token': provider.solve('evil.example') })
    t.same([elsewhere.status, elsewhere.body.code], [403, 'CAPTCHA_INVALID'], 'a token solved on another site is refused')
    const here = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.81', { ...page, 'captcha-token': provider.solve('app.acme.test') })
    t.equal(here.status, 200)
  })

  t.test('fails closed: a provider that is down, silent, garbled or refuses our secret gives 503, never a pass', async (t) => {
    await store.reset()
    const provider = await new FakeSiteverify(SECRET).start()
    t.teardown(async () => { await provider.stop() })
    const { call, keys, mailCount } = await startService(t, provider, { store })
    const before = mailCount()
    for (const mode of ['down', 'silent', 'garbage'] as const) {
      provider.mode = mode
      const answer = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.90', { ...page, 'captcha-token': provider.solve() })
      t.same([answer.status, answer.body.code, answer.headers['retry-after']], [503, 'UNAVAILABLE', '5'], mode)
    }
    t.equal(mailCount(), before, 'nothing was sent')

    const wrongSecret = await new FakeSiteverify('another-secret').start()
    t.teardown(async () => { await wrongSecret.stop() })
    const misconfigured = await startService(t, wrongSecret, { store })
    const answer = await misconfigured.call(misconfigured.keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.91', { ...page, 'captcha-token': wrongSecret.solve() })
    t.same([answer.status, answer.body.code], [503, 'UNAVAILABLE'], 'a wrong secret is the service\'s fault, not the visitor\'s')
  })

  t.test('refusals count: a flood of made-up tokens is limited, and a limited source costs the provider nothing', async (t) => {
    await store.reset()
    const provider = await new FakeSiteverify(SECRET).start()
    t.teardown(async () => { await provider.stop() })
    const { call, keys } = await startService(t, provider, { store, env: { RATE_LIMIT_SOURCE: '5/1m' } })
    const statuses: number[] = []
    for (let i = 0; i < 30; i++) statuses.push((await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.100', { ...page, 'captcha-token': `made-up-${i}` })).status)
    t.same(statuses.slice(0, 5), [403, 403, 403, 403, 403])
    t.same(new Set(statuses.slice(5)), new Set([429]), 'past the source limit: 429')
    t.ok(provider.calls.length <= 6, `the provider was asked ${provider.calls.length} times for 30 requests`)
    const other = await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.101', { ...page, 'captcha-token': provider.solve() })
    t.equal(other.status, 200, 'another visitor is not affected')
  })

  t.test('a refused or unverifiable CAPTCHA charges nothing', async (t) => {
    await store.reset()
    const provider = await new FakeSiteverify(SECRET).start()
    t.teardown(async () => { await provider.stop() })
    const { call, keys, used } = await startService(t, provider, { store })
    const dispatch = async (headers: Record<string, string>): ReturnType<typeof send> => await call(keys.acmeBrowser, { email: 'ada@example.com' }, '127.0.0.110', { ...page, ...headers })
    t.equal((await dispatch({})).body.code, 'CAPTCHA_REQUIRED')
    t.equal((await dispatch({ 'captcha-token': 'made-up' })).body.code, 'CAPTCHA_INVALID')
    t.equal((await dispatch({ 'captcha-token': provider.solve() })).status, 200)
    const afterOne = await used()
    t.equal(afterOne, 1, 'the one that passed is charged: the count is live')
    const token = provider.solve()
    provider.mode = 'down'
    t.equal((await dispatch({ 'captcha-token': token })).body.code, 'UNAVAILABLE', 'provider down')
    provider.mode = 'silent'
    t.equal((await dispatch({ 'captcha-token': provider.solve() })).body.code, 'UNAVAILABLE', 'provider silent')
    provider.mode = 'up'
    t.equal((await dispatch({ 'captcha-token': token })).status, 200, 'the token the provider never checked still passes')
    t.equal((await dispatch({ 'captcha-token': token })).body.code, 'CAPTCHA_INVALID', 'once')
    t.equal(await used(), afterOne + 1, '/usage: none of the five refused was charged')
    if (store.charged !== undefined) t.equal(await store.charged(), 2 * (afterOne + 1), 'the quota counters in Redis agree (the tenant\'s and the key\'s share)')
  })
}

t.test('in memory', async (t) => {
  captchaSuite(t, { env: {}, reset: async () => {} })
})

t.test('on Redis', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = await connectFailFast(redis.url)
  t.teardown(() => { client.disconnect() })
  captchaSuite(t, {
    env: { REDIS_URL: redis.url },
    reset: async () => { await client.flushall() },
    charged: async () => {
      const counters = await client.keys('quota:*')
      const values = counters.length === 0 ? [] : await client.mget(counters)
      return values.reduce((sum, value) => sum + Number(value ?? 0), 0)
    }
  })
})

t.test('CORS preflight lists Captcha-Token among the allowed headers', async (t) => {
  const { app } = await buildApp(t, { OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  const answer = await app.inject({ method: 'OPTIONS', url: '/otp/request', headers: { origin: 'https://app.acme.test', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, captcha-token' } })
  t.equal(answer.statusCode, 204)
  t.match(String(answer.headers['access-control-allow-headers']), /Captcha-Token/)
})

t.test('a closed port fails closed too', async (t) => {
  const provider = await new FakeSiteverify(SECRET).start()
  const url = provider.url
  await provider.stop()
  const { path, keys } = writeTenants(t, (file) => {
    const acme = file.tenants[0]
    if (acme !== undefined) acme.captcha = { provider: 'turnstile', secret: SECRET, siteverifyUrl: url }
  })
  const { app } = await buildApp(t, { TENANTS_FILE: path, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeBrowser), ...page, 'captcha-token': 'x.y' }, payload: { email: 'ada@example.com' } })
  t.same([answer.statusCode, answer.json().code], [503, 'UNAVAILABLE'])
})
