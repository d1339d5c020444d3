import { createServer, type Server } from 'node:http'
import { once } from 'node:events'
import { join } from 'node:path'
import { mock } from 'node:test'
import t, { type Test } from 'tap'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, writeTenants, type TestApp } from '../helper.js'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { listenApp, send } from '../support/http.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
import { attemptUntil, until } from '../support/wait.js'

async function listen (built: TestApp, host = '127.0.0.1'): Promise<number> {
  return await listenApp(built.app, host)
}

const json = { 'content-type': 'application/json' }
const dispatchBody = (email: string): string => JSON.stringify({ email })

// 103 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('body limit: 413 before authentication, with and without Content-Length', async (t) => {
  const built = await buildApp(t)
  const port = await listen(built)
  const huge = JSON.stringify({ email: 'a'.repeat(1024 * 1024) })
  for (const chunked of [false, true]) {
    const answer = await send({ port, path: '/otp/request', headers: json, body: huge, chunked })
    t.equal(answer.status, 413, chunked ? 'chunked' : 'with Content-Length')
    t.equal(answer.body.code, 'PAYLOAD_TOO_LARGE')
  }
})

t.test('block lists: IP CIDR files and the Tor list refuse sources before the key is checked', async (t) => {
  const dir = t.testdir({
    'hosting.txt': '# hosting ranges\n127.0.0.2/32\n10.0.0.0/8 # comment\n',
    'tor.txt': '127.0.0.3\n'
  })
  const { path, keys } = writeTenants(t, (file) => { file.tenants[0]!.blockedNetworks = ['127.0.0.5/32'] })
  const built = await buildApp(t, { TENANTS_FILE: path, IP_BLOCKLISTS: join(dir, 'hosting.txt'), TOR_EXIT_LIST: join(dir, 'tor.txt') })
  const port = await listen(built)
  for (const [localAddress, blocked] of [['127.0.0.2', true], ['127.0.0.3', true], ['127.0.0.4', false]] as const) {
    const anonymous = await send({ port, localAddress, path: '/otp/request', headers: json, body: dispatchBody('a@example.com') })
    t.equal(anonymous.status, blocked ? 403 : 401, `${localAddress} without a key`)
    if (blocked) t.equal(anonymous.body.code, 'SOURCE_BLOCKED')
  }
  const tenantBlocked = await send({ port, localAddress: '127.0.0.5', path: '/otp/request', headers: { ...json, ...bearer(keys.acmeLive) }, body: dispatchBody('a@example.com') })
  t.same([tenantBlocked.status, tenantBlocked.body.code], [403, 'SOURCE_BLOCKED'], "the tenant's own deny list")
  const otherTenant = await send({ port, localAddress: '127.0.0.5', path: '/otp/request', headers: { ...json, ...bearer(keys.globexTest) }, body: dispatchBody('a@example.com') })
  t.equal(otherTenant.status, 200, "another tenant's list does not apply")

  const health = await send({ port, localAddress: '127.0.0.2', method: 'GET', path: '/healthz' })
  t.equal(health.status, 200, 'health checks are not behind the block lists')
  const ready = (await readiness(built.app)).body
  t.match(ready.blocklists, [{ name: 'ip', entries: 2, lastError: null }, { name: 'tor', entries: 1 }])
})

t.test('large lists load: 10k Tor exits, 500k CIDR prefixes', async (t) => {
  const tor = Array.from({ length: 10_000 }, (_, i) => `100.${64 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`).join('\n')
  const cidrs = Array.from({ length: 500_000 }, (_, i) => `${11 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}.0/24`).join('\n')
  const dir = t.testdir({ 'tor.txt': tor, 'cidrs.txt': cidrs + '\n127.0.0.2\n' })
  const built = await buildApp(t, { IP_BLOCKLISTS: join(dir, 'cidrs.txt'), TOR_EXIT_LIST: join(dir, 'tor.txt') })
  const port = await listen(built)
  const ready = (await readiness(built.app)).body
  t.match(ready.blocklists, [{ name: 'ip', entries: 500_001 }, { name: 'tor', entries: 10_000 }])
  t.equal((await send({ port, localAddress: '127.0.0.2', path: '/otp/request', headers: json, body: '{}' })).status, 403)
  t.equal((await send({ port, localAddress: '127.0.0.9', path: '/otp/request', headers: json, body: '{}' })).status, 401)
})

t.test('a refresh that fails or looks wrong keeps the last good list', async (t) => {
  let list = '127.0.0.2\n127.0.0.3\n127.0.0.10\n127.0.0.11\n'
  let status = 200
  const server: Server = createServer((_request, response) => { response.writeHead(status).end(list) })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  const built = await buildApp(t, { IP_BLOCKLISTS: `http://127.0.0.1:${address.port}/list.txt`, BLOCKLIST_REFRESH_SECONDS: '1' })
  const port = await listen(built)
  const blocked = async (): Promise<boolean> => (await send({ port, localAddress: '127.0.0.2', path: '/otp/request', headers: json, body: '{}' })).status === 403
  const listStatus = async () => (await readiness(built.app)).body.blocklists[0]
  /**
   * Waits for a refresh to be refused for `reason` (its log line). A refresh that read the
   * source before the test changed it may be refused for the previous reason first.
   */
  const refused = async (reason: RegExp): Promise<void> => {
    const from = built.logs.lines.length
    await until(`a refresh refused for ${String(reason)}`, () => built.logs.lines.slice(from).some((text) => {
      const entry = JSON.parse(text)
      return entry.msg === 'block list refresh refused; keeping the last good list' && reason.test(entry.reason)
    }))
  }
  t.ok(await blocked())

  status = 500
  await refused(/HTTP 500/)
  t.ok(await blocked(), 'a failing source keeps the list')
  t.match((await listStatus()).lastError, /500/)
  status = 200
  list = ''
  await refused(/the new list is empty/)
  t.ok(await blocked(), 'an empty list is refused')
  list = '127.0.0.3\n'
  await refused(/1 entries, less than half of the 4/)
  t.ok(await blocked(), 'a list shrunk by more than half is refused')
  t.equal((await listStatus()).entries, 4, 'the last good list is the one in force')
  list = '127.0.0.3\n127.0.0.4\n127.0.0.6\n'
  await until('the sound list to be loaded', async () => (await listStatus()).entries === 3)
  t.notOk(await blocked(), 'a sound new list replaces the old one')
  t.equal((await listStatus()).lastError, null)
})

t.test('a block list that cannot be read at start: the service starts, is not ready and answers 503 until the list loads', async (t) => {
  let status = 503
  const server: Server = createServer((_request, response) => { response.writeHead(status).end('127.0.0.2\n') })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  // Refreshes hourly: only the retries of a list that never loaded can bring it in.
  const built = await buildApp(t, { IP_BLOCKLISTS: `http://127.0.0.1:${address.port}/list.txt`, BLOCKLIST_REFRESH_SECONDS: '3600' })
  const port = await listen(built)
  t.ok(built.logs.lines.some((line) => JSON.parse(line).msg === 'block list could not be loaded; not ready until it is, retrying'), 'the log says so')
  const notReady = await readiness(built.app)
  t.same([notReady.status, notReady.body.ready], [503, false], 'not ready')
  t.match(notReady.body.blocklists[0], { name: 'ip', entries: 0, loadedAt: null, lastError: /HTTP 503/ }, 'the list and why')
  t.match(notReady.body.checks, { tokenStore: { ok: true }, mailer: { ok: true } }, 'the stores are fine')
  const refused = await send({ port, localAddress: '127.0.0.9', path: '/otp/request', headers: { ...json, ...bearer(DEMO_SANDBOX_KEY) }, body: dispatchBody('a@example.com') })
  t.same([refused.status, refused.body.code, refused.headers['retry-after']], [503, 'UNAVAILABLE', '5'], 'the API does not serve without the list')
  t.equal((await send({ port, method: 'GET', path: '/healthz' })).status, 200, 'alive all along')

  const from = built.logs.lines.length
  await until('a retry to fail too', () => built.logs.lines.slice(from).some((line) => JSON.parse(line).msg === 'block list could not be loaded; not ready until it is, retrying'))
  status = 200
  await until('the list to load on a retry', async () => (await readiness(built.app)).status === 200)
  t.match((await readiness(built.app)).body.blocklists[0], { name: 'ip', entries: 1, lastError: null })
  t.equal((await send({ port, localAddress: '127.0.0.2', path: '/otp/request', headers: json, body: '{}' })).status, 403, 'its sources are refused')
  t.equal((await send({ port, localAddress: '127.0.0.9', path: '/otp/request', headers: { ...json, ...bearer(DEMO_SANDBOX_KEY) }, body: dispatchBody('a@example.com') })).status, 200, 'others are served')
})

/**
 * The checks an attacker meets first: on the in-process store and on a real redis-server,
 * whose scripts hold the same buckets, lists and lockout for every instance.
 */
/**
 * `clock`: whose clock ends a lock. In memory the service's, which a test drives (node:test's
 * MockTimers, Date only); on Redis, Redis's own, which a test can only wait for.
 */
function limitsSuite (t: Test, env: () => Record<string, string>, clock: 'service' | 'redis'): void {
  t.test('per-source limits on real distinct sources, X-Forwarded-For only through trusted hops', async (t) => {
    const { path, keys } = writeTenants(t)
    const built = await buildApp(t, { ...env(), TENANTS_FILE: path, RATE_LIMIT_SOURCE: '3/1m' })
    const port = await listen(built)
    const verify = async (localAddress: string, headers: Record<string, string> = {}) => await send({
      port, localAddress, path: '/otp/verify', headers: { ...json, ...bearer(keys.acmeLive), ...headers }, body: JSON.stringify({ requestId: 'otp_x', userGuess: '123456' })
    })
    const statuses = []
    for (let i = 0; i < 4; i++) statuses.push((await verify('127.0.0.6', { 'x-forwarded-for': `198.51.100.${i}` })).status)
    t.same(statuses, [400, 400, 400, 429], 'a spoofed X-Forwarded-For from an untrusted hop changes nothing')
    const limited = await verify('127.0.0.6')
    t.equal(limited.body.code, 'RATE_LIMITED')
    t.ok(Number(limited.headers['retry-after']) > 0, 'Retry-After')
    t.equal(limited.headers['ratelimit-limit'], '3')
    t.equal(limited.headers['ratelimit-remaining'], '0')
    const fresh = await verify('127.0.0.7')
    t.equal(fresh.status, 400, 'another source has its own bucket')
    t.equal(fresh.headers['ratelimit-remaining'], '2', 'RateLimit-* headers on allowed requests too')
  })

  t.test('through a trusted proxy: the client address decides; IPv6 is bucketed by /64', async (t) => {
    const dir = t.testdir({ 'block.txt': '203.0.113.7\n' })
    const { path, keys } = writeTenants(t)
    // The pace of refusals (its own tests) would hold most of the 200 429s below for seconds.
    const built = await buildApp(t, { ...env(), TENANTS_FILE: path, RATE_LIMIT_SOURCE: '3/1m', TRUST_PROXY: '127.0.0.1/32', IP_BLOCKLISTS: join(dir, 'block.txt'), REFUSAL_PACE_PER_SECOND: '0' })
    const port = await listen(built)
    const verify = async (forwarded: string) => await send({
      port, path: '/otp/verify', headers: { ...json, ...bearer(keys.acmeLive), 'x-forwarded-for': forwarded }, body: JSON.stringify({ requestId: 'otp_x', userGuess: '123456' })
    })
    t.equal((await verify('203.0.113.7')).status, 403, 'the forwarded client is on the block list')
    t.equal((await verify('203.0.113.7, 198.51.100.1')).status, 400, 'the right-most untrusted address is the client')

    const sameNet = []
    for (let i = 1; i <= 200; i++) sameNet.push((await verify(`2001:db8:1:2::${i.toString(16)}`)).status)
    t.same(sameNet.slice(0, 3), [400, 400, 400])
    t.ok(sameNet.slice(3).every((status) => status === 429), '200 addresses in one /64 share one bucket')
    t.equal((await verify('2001:db8:1:3::1')).status, 400, 'the next /64 is another source')
    t.equal((await verify('::ffff:198.51.100.9')).status, 400)
    t.equal((await verify('198.51.100.9')).status, 400)
    t.equal((await verify('198.51.100.9')).status, 400)
    t.equal((await verify('::ffff:198.51.100.9')).status, 429, '::ffff:a.b.c.d is a.b.c.d')
  })

  t.test('IPv6 loopback clients are limited like any other', async (t) => {
    const { path, keys } = writeTenants(t)
    const built = await buildApp(t, { ...env(), TENANTS_FILE: path, RATE_LIMIT_SOURCE: '2/1m' })
    const port = await listen(built, '::1')
    const statuses = []
    for (let i = 0; i < 3; i++) {
      statuses.push((await send({ port, host: '::1', path: '/otp/verify', headers: { ...json, ...bearer(keys.acmeLive) }, body: JSON.stringify({ requestId: 'otp_x', userGuess: '123456' }) })).status)
    }
    t.same(statuses, [400, 400, 429])
  })

  t.test('recipients: one bucket per canonical address; mail goes to the address as given', async (t) => {
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path, RATE_LIMIT_RECIPIENT: '2/15m' })
    const dispatch = async (email: string, key = keys.acmeLive) => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })
    t.equal((await dispatch('Victim@Example.COM')).statusCode, 200)
    t.match(mail.text, /To: Victim@example\.com\n/)
    t.equal((await dispatch('victim+other@example.com')).statusCode, 200)
    const third = await dispatch('victim@example.com')
    t.same([third.statusCode, third.json().code], [429, 'RATE_LIMITED'])
    t.match(third.json().message, /recipient/)
    t.equal(mail.count, 2)
    t.equal((await dispatch('victim@example.com', keys.acmeTest)).statusCode, 200, 'sandbox traffic has its own buckets')
    t.equal((await dispatch('victim@example.com', keys.globexTest)).statusCode, 200, 'so does every tenant')
  })

  t.test('disposable and denied recipient domains answer 403 RECIPIENT_BLOCKED', async (t) => {
    const { path, keys } = writeTenants(t, (file) => {
      file.tenants[0]!.recipients = { denyDomains: ['competitor.example'], allowDomains: ['yopmail.com'] }
      file.tenants[1]!.recipients = { blockDisposable: false }
    })
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const dispatch = async (email: string, key = keys.acmeLive) => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })
    for (const email of ['x@mailinator.com', 'x@MAILINATOR.com', 'x@deep.sub.mailinator.com', 'x@competitor.example', 'x@mx.competitor.example']) {
      const answer = await dispatch(email)
      t.same([answer.statusCode, answer.json().code], [403, 'RECIPIENT_BLOCKED'], email)
    }
    t.equal((await dispatch('x@yopmail.com')).statusCode, 200, "the tenant's allow list wins over the disposable list")
    t.equal((await dispatch('x@mailinator.com', keys.globexTest)).statusCode, 200, 'a tenant may switch the disposable list off')
    t.equal((await dispatch('x@example.com')).statusCode, 200)
    t.equal(mail.count, 3)
  })

  t.test('guess lockout: consecutive wrong guesses across requestIds lock dispatch; a right one resets', async (t) => {
    if (clock === 'service') {
      mock.timers.enable({ apis: ['Date'], now: Date.now() })
      t.teardown(() => { mock.timers.reset() })
    }
    const { path, keys } = writeTenants(t)
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path, LOCKOUT_THRESHOLD: '3', LOCKOUT_DURATION: '2s' })
    const dispatch = async (email: string) => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email } })
    const verify = async (requestId: string, userGuess: string) => await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess } })
    const wrongOnce = async (email: string): Promise<void> => {
      const requestId = (await dispatch(email)).json().data.requestId
      const code = mail.codeFor(email)
      await verify(requestId, String((Number(code) + 1) % 1e6).padStart(6, '0'))
    }
    await wrongOnce('lock@example.com')
    await wrongOnce('lock@example.com')
    const requestId = (await dispatch('LOCK@example.com')).json().data.requestId
    t.equal((await verify(requestId, mail.codeFor('LOCK@example.com'))).statusCode, 200)
    await wrongOnce('lock@example.com')
    await wrongOnce('lock@example.com')
    t.equal((await dispatch('lock@example.com')).statusCode, 200, 'the right guess reset the count')
    await wrongOnce('lock@example.com')
    const locked = await dispatch('lock@example.com')
    t.same([locked.statusCode, locked.json().code], [429, 'RATE_LIMITED'])
    t.match(locked.json().message, /wrong codes/)
    t.ok(Number(locked.headers['retry-after']) >= 1)
    t.equal((await dispatch('other@example.com')).statusCode, 200, 'other recipients are not affected')
    if (clock === 'service') {
      mock.timers.tick(1999)
      t.equal((await dispatch('lock@example.com')).statusCode, 429, 'still locked a millisecond before LOCKOUT_DURATION')
      mock.timers.tick(1)
      t.equal((await dispatch('lock@example.com')).statusCode, 200, 'the first lock ends after LOCKOUT_DURATION')
    } else {
      const answers = await attemptUntil('the lock to end', async () => (await dispatch('lock@example.com')).statusCode, (status) => status !== 429)
      t.same(answers.slice(0, -1).filter((status) => status !== 429), [], 'locked until then')
      t.equal(answers.at(-1), 200, 'the first lock ends after LOCKOUT_DURATION')
    }
  })
}

t.test('in memory', async (t) => { limitsSuite(t, () => ({}), 'service') })

t.test('on Redis', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = await connectFailFast(redis.url)
  t.teardown(() => { client.disconnect() })
  // Every test uses the same tenants and addresses: each starts from an empty Redis.
  t.beforeEach(async () => { await client.flushall() })
  limitsSuite(t, () => ({ REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }), 'redis')
})

t.test('two instances on one Redis share every limit and the lockout; a Redis outage fails closed', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  // Four requests reach the key's bucket before the last four dispatches: two to shared@ (the
  // third stops at its recipient's bucket), guess@'s dispatch and its verify (the locked
  // dispatch stops at the lock); the last of the four is the eighth, one past the limit.
  const env = { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, RATE_LIMIT_RECIPIENT: '2/15m', RATE_LIMIT_KEY: '7/1m', LOCKOUT_THRESHOLD: '1' }
  const a = await buildApp(t, env)
  const b = await buildApp(t, env)
  const dispatch = async (built: TestApp, email: string) => await built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email } })
  t.equal((await dispatch(a, 'shared@example.com')).statusCode, 200)
  t.equal((await dispatch(b, 'shared@example.com')).statusCode, 200)
  t.equal((await dispatch(a, 'shared@example.com')).statusCode, 429, 'the recipient bucket is shared')

  const requestId = (await dispatch(a, 'guess@example.com')).json().data.requestId
  await b.app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess: '000000' } })
  const locked = await dispatch(a, 'guess@example.com')
  t.same([locked.statusCode, locked.json().code], [429, 'RATE_LIMITED'], 'a wrong guess on B locks dispatch on A')
  t.match(locked.json().message, /wrong codes/)

  const answers = [...await Promise.all([1, 2, 3, 4].map(async (i) => await dispatch(i % 2 === 0 ? a : b, `k${i}@example.com`)))]
  t.ok(answers.some((answer) => answer.statusCode === 429 && /key/.test(answer.json().message)), 'the per-key bucket is shared')

  await redis.stop()
  const down = await a.app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: 'otp_x', userGuess: '123456' } })
  t.same([down.statusCode, down.json().code], [503, 'UNAVAILABLE'], 'a limiter without Redis fails closed')
})
