import { once } from 'node:events'
import type { timingSafeEqual } from 'node:crypto'
import { createRequire, syncBuiltinESMExports } from 'node:module'
import { connect } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import { setTimeout as sleep } from 'node:timers/promises'
import { Gauge } from 'prom-client'
import t, { type Test } from 'tap'
import { internalApp, serverOptions } from '../../app.js'
import { ConfigError, parseConfig } from '../../lib/config/from-env.js'
import { sharedRender } from '../../plugins/metrics.js'
import { bearer, buildApp, TEST_HMAC_KEYS, TEST_METRICS_TOKEN, writeTenants } from '../helper.js'
import { send } from '../support/http.js'
import { freePort, redisTestOptions, startRedis } from '../support/redis.js'
import { startServer } from '../support/service-process.js'

const ORIGIN = 'https://app.acme.test'

async function listen (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening')
  return address.port
}

/** The internal listener of a service app, as server.ts builds it. */
async function internalListener (t: Test, service: FastifyInstance): Promise<number> {
  const config = parseConfig({ LOG_LEVEL: 'silent' })
  const internal = Fastify(serverOptions(config))
  await internal.register(internalApp, { service })
  t.teardown(async () => { await internal.close() })
  return await listen(internal)
}

/** Two Authorization headers in one request, which only a raw socket can send. */
async function withTwoAuthorizations (port: number, path: string, first: string, second: string): Promise<string> {
  const socket = connect(port, '127.0.0.1')
  let text = ''
  socket.on('data', (chunk: Buffer) => { text += chunk.toString() })
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: ${first}\r\nAuthorization: ${second}\r\n\r\n`)
  await once(socket, 'close')
  return text
}

t.test('GET /metrics exposes request, outcome and rejection metrics in Prometheus format', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path, RATE_LIMIT_RECIPIENT: '1/1m' })
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'm@example.com' } })
  await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'm@example.com' } })
  await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: sent.json().data.requestId, userGuess: mail.codeFor('m@example.com') } })
  await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeTest), payload: { email: 'fail@simulator.invalid' } })
  await app.inject({ method: 'POST', url: '/otp/request', payload: { email: 'm@example.com' } })

  const answer = await app.inject({ method: 'GET', url: '/metrics', headers: bearer(TEST_METRICS_TOKEN) })
  t.equal(answer.statusCode, 200)
  t.match(answer.headers['content-type'], /text\/plain/)
  const text = answer.body
  t.match(text, /email_otp_http_request_duration_seconds_count\{method="POST",route="\/otp\/request",status="200"\} 1/)
  t.match(text, /email_otp_http_request_duration_seconds_bucket\{le="0\.005",method="POST",route="\/otp\/verify",status="200"\}/)
  t.match(text, /email_otp_dispatches_total\{tenant="acme",mode="live",result="sent"\} 1/)
  t.match(text, /email_otp_dispatches_total\{tenant="acme",mode="test",result="delivery_failed"\} 1/)
  t.match(text, /email_otp_verifications_total\{tenant="acme",mode="live",result="verified"\} 1/)
  t.match(text, /email_otp_lockouts_total\{tenant="globex",mode="live"\} 0/, 'rare events that alerts count start at zero for every tenant')
  t.match(text, /email_otp_ses_events_total\{tenant="globex",event="bounced_permanent"\} 0/)
  t.match(text, /email_otp_ses_events_total\{tenant="acme",event="complained"\} 0/)
  t.notMatch(text, /email_otp_dispatches_total\{tenant="globex"/, 'everyday counters of a tenant without traffic have no series')
  t.match(text, /email_otp_webhook_attempts_total\{outcome="dead"\} 0/)
  t.match(text, /email_otp_mail_circuit_skips_total\{transport="log"\} 0/)
  t.match(text, /email_otp_allowance_used\{tenant="acme"\} 1\n/, 'the one live dispatch sent is charged')
  t.match(text, /email_otp_allowance_limit\{tenant="acme"\} 1000\n/)
  t.match(text, /email_otp_delivery_failures_total\{kind="rejected"\} 1/)
  t.match(text, /email_otp_errors_total\{code="RATE_LIMITED"\} 1/)
  t.match(text, /email_otp_errors_total\{code="UNAUTHORIZED"\} 1/)
  t.match(text, /email_otp_process_cpu_seconds_total/)
  t.notMatch(text, /m@example\.com/, 'no address in any label')
})

t.test('by default /metrics is not on the public listener, and /readyz says only ready or not', async (t) => {
  // An empty variable is an unset one: no METRICS_TOKEN, no METRICS_PORT.
  const { app } = await buildApp(t, { METRICS_TOKEN: '' })
  const port = await listen(app)
  const metrics = await send({ port, method: 'GET', path: '/metrics', headers: { origin: ORIGIN } })
  t.same([metrics.status, metrics.body.code], [404, 'NOT_FOUND'])

  const ready = await send({ port, method: 'GET', path: '/readyz', headers: { origin: ORIGIN } })
  t.equal(ready.status, 200)
  t.same(ready.body, { ready: true }, 'no store kinds, list sizes, ages or errors')
  t.equal(ready.headers['access-control-allow-origin'], undefined, 'no CORS')
  const guessed = await send({ port, method: 'GET', path: '/readyz', headers: bearer('metrics-token-guessed-0123456789') })
  t.same(guessed.body, { ready: true }, 'no token configured: no token unlocks the details')
})

t.test('METRICS_TOKEN: /metrics and /readyz details for the token holder only, never with CORS', async (t) => {
  const blocklist = t.testdir({ 'tor.txt': '192.0.2.1\n' })
  const { app } = await buildApp(t, { TOR_EXIT_LIST: `${blocklist}/tor.txt` })
  const port = await listen(app)
  const get = async (path: string, headers: Record<string, string> = {}) => await send({ port, method: 'GET', path, headers: { origin: ORIGIN, ...headers } })

  for (const [name, headers] of [['no token', {}], ['a wrong token', bearer('wrong-token-0123456789abcdefghij')], ['the token without Bearer', { authorization: TEST_METRICS_TOKEN }]] as const) {
    const answer = await get('/metrics', headers)
    t.same([answer.status, answer.body.code], [401, 'UNAUTHORIZED'], `/metrics with ${name}`)
    t.same(Object.keys(answer.body).sort(), ['code', 'message', 'success'])
    t.same((await get('/readyz', headers)).body, { ready: true }, `/readyz with ${name}`)
  }
  const doubled = await withTwoAuthorizations(port, '/metrics', `Bearer ${TEST_METRICS_TOKEN}`, 'Bearer other')
  t.match(doubled, /^HTTP\/1\.1 401 /, 'two Authorization headers, the first one right: 401')
  t.match(await withTwoAuthorizations(port, '/readyz', `Bearer ${TEST_METRICS_TOKEN}`, `Bearer ${TEST_METRICS_TOKEN}`), /\{"ready":true\}$/, 'and no details')

  const metrics = await get('/metrics', bearer(TEST_METRICS_TOKEN))
  t.equal(metrics.status, 200)
  t.match(metrics.body, /email_otp_nodejs_version_info/)
  t.equal(metrics.headers['access-control-allow-origin'], undefined, 'no CORS on /metrics')
  t.equal(metrics.headers['cache-control'], 'no-store')
  const ready = await get('/readyz', bearer(TEST_METRICS_TOKEN))
  t.match(ready.body, { ready: true, checks: { tokenStore: { ok: true, kind: 'memory' }, mailer: { ok: true, kind: 'log' } }, blocklists: [{ name: 'tor', entries: 1 }] })
  t.equal(ready.headers['access-control-allow-origin'], undefined, 'no CORS on /readyz')

  for (const path of ['/metrics', '/readyz']) {
    const preflight = await send({ port, method: 'OPTIONS', path, headers: { origin: ORIGIN, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' } })
    t.equal(preflight.status, 204, `OPTIONS ${path}`)
    t.equal(preflight.headers['access-control-allow-origin'], undefined, `no preflight is granted for ${path}`)
    t.match(preflight.headers.allow, /GET/)
  }
  const api = await send({ port, method: 'OPTIONS', path: '/otp/request', headers: { origin: ORIGIN, 'access-control-request-method': 'POST' } })
  t.equal(api.headers['access-control-allow-origin'], ORIGIN, 'the API itself still answers preflights')
})

t.test('METRICS_TOKEN is compared in constant time: timingSafeEqual on equal lengths, whatever the length presented', async (t) => {
  // node:crypto's own function, seen through the module every import of it shares.
  const crypto = createRequire(import.meta.url)('node:crypto') as { timingSafeEqual: typeof timingSafeEqual }
  const original = crypto.timingSafeEqual
  const compared: Array<[number, number]> = []
  crypto.timingSafeEqual = (a, b) => {
    compared.push([a.byteLength, b.byteLength])
    return original(a, b)
  }
  syncBuiltinESMExports()
  t.teardown(() => {
    crypto.timingSafeEqual = original
    syncBuiltinESMExports()
  })

  const { app } = await buildApp(t)
  const expected = `Bearer ${TEST_METRICS_TOKEN}`
  // Every length from none to twice the right one, each one byte off the right header where
  // they overlap, and the right header itself.
  const wrong = Array.from({ length: 2 * expected.length + 1 }, (_, length) => expected.padEnd(length, 'x').slice(0, length).replace(/.$/, (last) => last === 'x' ? 'y' : 'x'))
  for (const [path, refused] of [['/metrics', 401], ['/readyz', 200]] as const) {
    for (const header of [...wrong, expected]) {
      compared.length = 0
      const answer = await app.inject({ method: 'GET', url: path, headers: { authorization: header } })
      const right = header === expected
      t.equal(answer.statusCode, right ? 200 : refused, `${path}, ${header.length} characters: ${right ? 'the token' : 'refused'}`)
      if (path === '/readyz') t.equal('checks' in answer.json(), right, `${path}, ${header.length} characters: details only with the token`)
      t.ok(compared.length === 1 && compared[0]?.[0] === compared[0]?.[1], `${path}, ${header.length} characters: one timingSafeEqual on equal lengths (${JSON.stringify(compared)})`)
    }
  }
})

t.test('the internal listener serves metrics and readiness details without credentials, and nothing else', async (t) => {
  const { app } = await buildApp(t, { METRICS_TOKEN: '' })
  const publicPort = await listen(app)
  const port = await internalListener(t, app)
  await app.inject({ method: 'POST', url: '/otp/request', payload: {} })

  const metrics = await send({ port, method: 'GET', path: '/metrics', headers: { origin: ORIGIN } })
  t.equal(metrics.status, 200)
  t.match(metrics.body, /email_otp_errors_total\{code="UNAUTHORIZED"\} 1/, "the service's own counters")
  t.equal(metrics.headers['access-control-allow-origin'], undefined)
  const ready = await send({ port, method: 'GET', path: '/readyz' })
  t.match(ready.body, { ready: true, checks: { tokenStore: { ok: true, kind: 'memory' } }, blocklists: [] })
  t.same((await send({ port, method: 'GET', path: '/healthz' })).body, { ok: true })

  const api = await send({ port, path: '/otp/request', headers: { 'content-type': 'application/json' }, body: '{}' })
  t.same([api.status, api.body.code], [404, 'NOT_FOUND'], 'the API is not reachable through it')
  const wrongMethod = await send({ port, method: 'POST', path: '/metrics' })
  t.same([wrongMethod.status, wrongMethod.body.code, wrongMethod.headers.allow], [405, 'METHOD_NOT_ALLOWED', 'GET, HEAD, OPTIONS'])
  t.equal((await send({ port: publicPort, method: 'GET', path: '/metrics' })).status, 404, 'and the public listener still has no /metrics')
})

t.test('scrapes share renders: concurrent ones one render, on both listeners; the next render waits, and sees what changed', async (t) => {
  const { app } = await buildApp(t)
  const publicPort = await listen(app)
  const port = await internalListener(t, app)
  // A gauge that counts its own collects and takes 50 ms: the render's cost, and its count.
  let collects = 0
  let value = 1
  app.metrics.registry.registerMetric(new Gauge({
    name: 'email_otp_test_collects',
    help: 'Collects of this registry, for the test.',
    registers: [],
    async collect () {
      collects++
      await sleep(50)
      this.set(value)
    }
  }))
  const scrape = async (onPort = port) => {
    const answer = await send({ port: onPort, method: 'GET', path: '/metrics', headers: bearer(TEST_METRICS_TOKEN) })
    t.equal(answer.status, 200)
    return Number(/^email_otp_test_collects (\d+)$/m.exec(answer.body)?.[1])
  }

  const concurrent = await Promise.all(Array.from({ length: 8 }, async (_, index) => await scrape(index % 2 === 0 ? port : publicPort)))
  t.same([concurrent, collects], [Array(8).fill(1), 1], '8 scrapes at once, on the internal and the public listener: one render')

  value = 2
  const started = performance.now()
  t.equal(await scrape(), 2, 'the next scrape sees the new value')
  const waited = performance.now() - started
  t.equal(collects, 2, 'from a render of its own')
  t.ok(waited >= 500, `after a pause of 20 times the last render's duration, at most a second (${Math.round(waited)} ms)`)

  // Eight loops of scrapes for 1.5 s: renders stay about one a second.
  const before = collects
  let scrapes = 0
  const until = performance.now() + 1500
  await Promise.all(Array.from({ length: 8 }, async () => { while (performance.now() < until) { await scrape(); scrapes++ } }))
  t.ok(collects - before <= 3, `${scrapes} scrapes, ${collects - before} renders`)
})

t.test('sharedRender: a failed render fails the scrapes that shared it, and the next one renders again', async (t) => {
  let calls = 0
  const render = sharedRender(async () => {
    calls++
    await sleep(10)
    if (calls === 1) throw new Error('a collect failed')
    return `render ${calls}`
  }, () => 0)
  const first = await Promise.allSettled([render(), render()])
  t.same(first.map((outcome) => outcome.status), ['rejected', 'rejected'])
  t.same(await Promise.all([render(), render()]), ['render 2', 'render 2'])
  t.equal(calls, 2)
})

t.test('a real process with METRICS_PORT: metrics on the internal listener only', async (t) => {
  const metricsPort = await freePort()
  const server = await startServer(t, { METRICS_PORT: String(metricsPort) })
  t.equal((await fetch(`${server.base}/metrics`)).status, 404, 'not on the public listener')
  const internal = await fetch(`http://127.0.0.1:${metricsPort}/metrics`)
  t.equal(internal.status, 200)
  t.match(await internal.text(), /email_otp_http_request_duration_seconds/)
  t.same(await (await fetch(`${server.base}/readyz`)).json(), { ready: true })
  t.match(await (await fetch(`http://127.0.0.1:${metricsPort}/readyz`)).json(), { ready: true, checks: { mailer: { kind: 'log' } } })

  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  t.same(await exited, [0, null], 'SIGTERM closes both listeners and exits cleanly')
})

t.test('METRICS_* configuration rules', async (t) => {
  t.same(parseConfig({}).metricsListener, null, 'no internal listener unless METRICS_PORT is set')
  t.same(parseConfig({ METRICS_PORT: '9464' }).metricsListener, { host: '127.0.0.1', port: 9464 }, 'on loopback unless METRICS_HOST says otherwise')
  t.same(parseConfig({ METRICS_PORT: '9464', METRICS_HOST: '10.0.0.5' }).metricsListener, { host: '10.0.0.5', port: 9464 })
  const cases: Array<[Record<string, string>, string, RegExp]> = [
    [{ METRICS_HOST: '0.0.0.0' }, 'METRICS_HOST', /^Invalid configuration: METRICS_HOST is only used with METRICS_PORT$/],
    [{ METRICS_PORT: '3000' }, 'METRICS_PORT', /^Invalid configuration: METRICS_PORT must differ from PORT \(3000\)/],
    [{ METRICS_PORT: '70000' }, 'METRICS_PORT', /^Invalid configuration: METRICS_PORT must be an integer from 0 to 65535 \(got "?70000"?\)$/],
    [{ METRICS_TOKEN: 'short' }, 'METRICS_TOKEN', /^Invalid configuration: METRICS_TOKEN must be at least 16 characters long$/]
  ]
  for (const [env, variable, message] of cases) {
    const error = t.throws(() => parseConfig(env)) as ConfigError
    t.equal(error.variable, variable)
    t.match(error.message, message)
    t.notMatch(error.message, /short/, 'the token is never echoed')
  }
})

t.test('allowance gauges: every tenant read over several turns; a tenant whose read fails keeps its last figures', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  let tenants = 0
  const { path } = writeTenants(t, (file) => {
    const [first] = file.tenants
    if (first === undefined) throw new Error('the fixture has a tenant')
    // More than two turns' worth of tenants.
    for (let index = 0; index < 250; index++) file.tenants.push({ ...first, id: `extra${index}`, keys: [], reviewAddresses: [] })
    tenants = file.tenants.length
  })
  const { app } = await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  const limits = async (): Promise<number> => {
    const text = (await app.inject({ method: 'GET', url: '/metrics', headers: bearer(TEST_METRICS_TOKEN) })).body
    return text.split('\n').filter((line) => line.startsWith('email_otp_allowance_limit{')).length
  }
  t.equal(await limits(), tenants, `one series a tenant (${tenants})`)
  redis.freeze()
  t.teardown(() => { redis.thaw() })
  t.equal(await limits(), tenants, 'Redis silent: each tenant keeps its last figures')
})
