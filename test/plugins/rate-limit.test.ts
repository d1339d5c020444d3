import t from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

t.test('routes outside the OTP admission step have limits of their own, shared through Redis', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const env = { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, RATE_LIMIT_ACCOUNT: '3/1m', RATE_LIMIT_PUBLIC: '4/1m' }
  const a = await buildApp(t, env)
  const b = await buildApp(t, env)
  const portA = await listenApp(a.app)
  const portB = await listenApp(b.app)
  const get = async (port: number, path: string, headers: Record<string, string> = {}, localAddress = '127.0.0.80') =>
    await send({ port, localAddress, method: 'GET', path, headers })

  const usage = []
  for (let i = 0; i < 4; i++) usage.push((await get(i % 2 === 0 ? portA : portB, '/usage', bearer(keys.acmeLive))).status)
  t.same(usage, [200, 200, 200, 429], 'per API key, across both instances')
  const limited = await get(portA, '/usage', bearer(keys.acmeLive), '127.0.0.81')
  t.same([limited.status, limited.body.code], [429, 'RATE_LIMITED'], 'whatever address the key calls from, in the contract\'s shape')
  t.ok(Number(limited.headers['retry-after']) > 0, 'with Retry-After')
  t.equal(limited.headers['ratelimit-limit'], '3')
  t.equal((await get(portA, '/usage', bearer(keys.acmeTest))).status, 200, 'another key has its own budget')

  const scans = []
  for (let i = 0; i < 5; i++) scans.push((await get(i % 2 === 0 ? portA : portB, `/wp-admin/${i}.php`, {}, '127.0.0.82')).status)
  t.same(scans, [404, 404, 404, 404, 429], 'unknown paths: per client address')
  t.equal((await get(portA, '/nope', {}, '127.0.0.83')).status, 404, 'another address is not slowed')
  const ready = []
  for (let i = 0; i < 5; i++) ready.push((await get(portB, '/readyz', {}, '127.0.0.84')).status)
  t.same(ready, [200, 200, 200, 200, 200], '/readyz is a probe: never limited')
  t.equal((await get(portA, '/healthz', {}, '127.0.0.84')).status, 200, 'liveness is never limited')
})

t.test('in process, a flood from fresh addresses on public routes forgets no key\'s account limit', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, RATE_LIMIT_ACCOUNT: '3/1m', RATE_LIMIT_PUBLIC: '1000/1m' })
  const port = await listenApp(app)
  const get = async (path: string, headers: Record<string, string>, localAddress: string) => await send({ port, localAddress, method: 'GET', path, headers })
  t.equal((await get('/usage', bearer(keys.acmeLive), '127.0.0.85')).status, 200)
  t.equal((await get('/usage', bearer(keys.acmeLive), '127.0.0.85')).status, 200)
  // More fresh addresses than @fastify/rate-limit's in-memory table holds by default (5,000).
  const flood = 6000
  let answered = 0
  for (let batch = 0; batch < flood; batch += 50) {
    const statuses = await Promise.all(Array.from({ length: 50 }, async (_, i) => {
      const n = batch + i
      return (await get(n % 2 === 0 ? '/readyz' : `/scan/${n}`, {}, `127.2.${n >> 8}.${n & 255}`)).status
    }))
    answered += statuses.filter((status) => status === 200 || status === 404).length
  }
  t.equal(answered, flood, 'every fresh address was counted (none was limited)')
  const after = await get('/usage', bearer(keys.acmeLive), '127.0.0.85')
  t.same([after.status, after.headers['ratelimit-remaining']], [200, '0'], 'the key\'s count survived: its third call of the window')
  t.equal((await get('/usage', bearer(keys.acmeLive), '127.0.0.86')).status, 429, 'and its fourth is refused')
})
