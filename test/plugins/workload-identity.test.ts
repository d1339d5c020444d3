/*
 * Workload identity through a "sidecar": the service listens on loopback, and 127.0.0.6 (the
 * address Istio's sidecar connects from) is the only TRUST_PROXY peer. Every request is a real
 * socket from a real source address; the stores are the in-process one and a redis-server.
 * Requests "through the ingress gateway" carry the gateway's identity, as our sidecar names the
 * peer of its mTLS, and the X-Forwarded-For the gateway wrote (the sidecars add nothing to it).
 */
import { createHash } from 'node:crypto'
import t, { type Test } from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, TEST_METRICS_TOKEN, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { workloadBucket } from '../../lib/net/workload-identity.js'

const SIDECAR = '127.0.0.6'
const STRANGER = '127.0.0.7'
const td = 'spiffe://cluster.local/ns'
const json = { 'content-type': 'application/json' }
const xfcc = (uri: string): Record<string, string> => ({ 'x-forwarded-client-cert': `By=${td}/otp/sa/email-otp;Hash=9f86d081884c7d65;Subject="CN=client, O=\\"Acme\\"";URI=${uri}` })

async function scenario (t: Test, store: Record<string, string>): Promise<void> {
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.keys[0]!.workloads = [`${td}/payments/sa/api`, `${td}/jobs/sa/*`]
  })
  const { app } = await buildApp(t, { ...store, TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: 'none', RATE_LIMIT_SOURCE: '2/1m' })
  const port = await listenApp(app)
  const dispatch = async (key: string, from: string, headers: Record<string, string>, email = 'jo@example.com') =>
    await send({ port, localAddress: from, path: '/otp/request', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify({ email }) })
  const verify = async (key: string, from: string, headers: Record<string, string>) =>
    await send({ port, localAddress: from, path: '/otp/verify', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify({ requestId: 'otp_unknown', userGuess: '000000' }) })
  const outcome = (answer: { status: number, body: any }) => [answer.status, answer.body.code ?? 'ok']

  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, xfcc(`${td}/payments/sa/api`), 'a@example.com')), [200, 'ok'], 'a bound key from its workload')
  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, xfcc(`${td}/jobs/sa/nightly`), 'b@example.com')), [200, 'ok'], 'from a service account of its namespace')
  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, xfcc(`${td}/web/sa/frontend`))), [403, 'WORKLOAD_NOT_ALLOWED'], 'from another workload')
  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, xfcc(`${td}/jobs/sa/..`))), [403, 'WORKLOAD_NOT_ALLOWED'], 'nor a last segment no SPIFFE ID holds')
  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, {})), [403, 'WORKLOAD_NOT_ALLOWED'], 'through the sidecar without an identity')
  t.same(outcome(await dispatch(keys.acmeLive, STRANGER, xfcc(`${td}/payments/sa/api`))), [403, 'WORKLOAD_NOT_ALLOWED'], 'a leaked key with a forged header from outside the mesh')
  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, { 'x-forwarded-client-cert': `By=x;URI=${td}/payments/sa/api;Subject="unterminated` })), [400, 'INVALID_WORKLOAD_IDENTITY'], 'a malformed header from the sidecar')
  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, { 'x-forwarded-client-cert': `URI=${td}/payments/sa/api,By=x;Hash=h` })), [400, 'INVALID_WORKLOAD_IDENTITY'], 'a last element without a URI')
  t.same(outcome(await dispatch(keys.acmeTest, STRANGER, { 'x-forwarded-client-cert': 'Subject="unterminated' }, 'c@example.com')), [200, 'ok'], 'from outside the mesh the header is ignored, malformed or not')
  t.same(outcome(await dispatch(keys.acmeTest, SIDECAR, {}, 'd@example.com')), [200, 'ok'], 'an unbound key through the sidecar without an identity')
  t.same(outcome(await dispatch(keys.acmeTest, SIDECAR, xfcc(`${td}/web/sa/frontend`), 'e@example.com')), [200, 'ok'], 'an unbound key from any workload')

  // Per-source buckets count per workload: two services behind one sidecar address.
  const web = xfcc(`${td}/shop/sa/frontend`)
  const billing = xfcc(`${td}/billing/sa/worker`)
  const webCounts = []
  for (let i = 0; i < 3; i++) webCounts.push(outcome(await verify(keys.acmeTest, SIDECAR, web)))
  t.same(webCounts, [[400, 'CODE_MISMATCH'], [400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'one workload reaches RATE_LIMIT_SOURCE')
  t.same(outcome(await verify(keys.acmeTest, SIDECAR, billing)), [400, 'CODE_MISMATCH'], 'another workload behind the same sidecar has its own bucket')
  // The dispatch above without an identity counted once in the bucket of every such caller.
  t.same([outcome(await verify(keys.acmeTest, SIDECAR, {})), outcome(await verify(keys.acmeTest, SIDECAR, {}))], [[400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'callers without an identity share one bucket')
  t.same(outcome(await verify(keys.acmeTest, STRANGER, web)), [400, 'CODE_MISMATCH'], 'a forged identity from outside counts against its own address, not the workload')
  t.same(outcome(await verify(keys.acmeTest, SIDECAR, web)), [429, 'RATE_LIMITED'], 'and leaves the workload\'s count as it was')
}

t.test('x-forwarded-client-cert through a sidecar address, in process', async (t) => {
  await scenario(t, {})
})

t.test('x-forwarded-client-cert through a sidecar address, on a real redis-server', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  await scenario(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
})

t.test('l5d-client-id: the identity verbatim, public routes limited per workload', async (t) => {
  const linkerd = (name: string): Record<string, string> => ({ 'l5d-client-id': `${name}.payments.serviceaccount.identity.linkerd.cluster.local` })
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.keys[0]!.workloads = ['api.payments.serviceaccount.identity.linkerd.cluster.local']
  })
  const { app } = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'l5d-client-id', MESH_GATEWAY_IDENTITIES: 'none', RATE_LIMIT_PUBLIC: '1/1m' })
  const port = await listenApp(app)
  const usage = async (headers: Record<string, string>) => (await send({ port, localAddress: SIDECAR, method: 'GET', path: '/usage', headers: { ...bearer(keys.acmeLive), ...headers } })).status
  t.equal(await usage(linkerd('api')), 200)
  t.equal(await usage(linkerd('web')), 403)
  t.equal(await usage({ 'x-forwarded-client-cert': 'URI=api.payments.serviceaccount.identity.linkerd.cluster.local' }), 403, 'only the configured header is read')
  t.equal((await send({ port, localAddress: SIDECAR, method: 'GET', path: '/usage', headers: { ...bearer(keys.acmeLive), 'l5d-client-id': 'two words' } })).body.code, 'INVALID_WORKLOAD_IDENTITY')

  const scan = async (headers: Record<string, string>) => (await send({ port, localAddress: SIDECAR, method: 'GET', path: '/nope', headers })).status
  t.same([await scan(linkerd('a')), await scan(linkerd('a')), await scan(linkerd('b'))], [404, 429, 404], 'the public routes\' per-source limit counts per workload')
})

const GATEWAY = `${td}/istio-system/sa/istio-ingressgateway-service-account`

/** Through the ingress gateway: its identity, and the X-Forwarded-For it wrote. */
const viaGateway = (forwardedFor?: string): Record<string, string> => ({ ...xfcc(GATEWAY), ...(forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor }) })

async function gatewayScenario (t: Test, store: Record<string, string>): Promise<void> {
  const { path, keys } = writeTenants(t, (file) => {
    const [live, , browser] = file.tenants[0]!.keys
    live!.workloads = [`${td}/payments/sa/api`]
    browser!.workloads = [GATEWAY]
  })
  const { app } = await buildApp(t, { ...store, TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: `${td}/edge/sa/*,${GATEWAY}`, RATE_LIMIT_SOURCE: '2/1m' })
  const port = await listenApp(app)
  const verify = async (from: string, headers: Record<string, string>) => {
    const answer = await send({ port, localAddress: from, path: '/otp/verify', headers: { ...json, ...bearer(keys.acmeTest), ...headers }, body: JSON.stringify({ requestId: 'otp_unknown', userGuess: '000000' }) })
    return [answer.status, answer.body.code]
  }
  const dispatch = async (key: string, from: string, headers: Record<string, string>) => {
    const answer = await send({ port, localAddress: from, path: '/otp/request', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify({ email: 'jo@example.com' }) })
    return [answer.status, answer.body.code ?? 'ok']
  }

  const first = [await verify(SIDECAR, viaGateway('203.0.113.1')), await verify(SIDECAR, viaGateway('203.0.113.1')), await verify(SIDECAR, viaGateway('203.0.113.1'))]
  t.same(first, [[400, 'CODE_MISMATCH'], [400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'one end user behind the gateway reaches RATE_LIMIT_SOURCE')
  t.same(await verify(SIDECAR, viaGateway('203.0.113.2')), [400, 'CODE_MISMATCH'], 'another end user behind the same gateway still has its own bucket')
  t.same(await verify(SIDECAR, viaGateway('198.51.100.77, 203.0.113.1')), [429, 'RATE_LIMITED'], 'an end user who writes X-Forwarded-For itself is still counted by the address the gateway appended')
  t.same(await verify(SIDECAR, { ...xfcc(`${td}/edge/sa/public`), 'x-forwarded-for': '203.0.113.1' }), [429, 'RATE_LIMITED'], 'a gateway named by its namespace: the same end user, the same bucket')

  t.same(await verify(SIDECAR, viaGateway()), [400, 'INVALID_FORWARDED_FOR'], 'a gateway\'s request without X-Forwarded-For is refused, not counted as the gateway')
  t.same(await verify(SIDECAR, viaGateway('unknown')), [400, 'INVALID_FORWARDED_FOR'], 'nor with an entry that names no address')

  const internal = xfcc(`${td}/shop/sa/frontend`)
  const workloadCounts = [
    await verify(SIDECAR, { ...internal, 'x-forwarded-for': '203.0.113.2' }),
    await verify(SIDECAR, { ...internal, 'x-forwarded-for': '203.0.113.3' }),
    await verify(SIDECAR, { ...internal, 'x-forwarded-for': '203.0.113.4' })
  ]
  t.same(workloadCounts, [[400, 'CODE_MISMATCH'], [400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'an internal workload has one bucket, whatever its X-Forwarded-For says')
  t.same(await verify(SIDECAR, viaGateway('203.0.113.2')), [400, 'CODE_MISMATCH'], 'and naming an end user\'s address did not spend that end user\'s bucket')

  t.same(await dispatch(keys.acmeLive, SIDECAR, viaGateway('203.0.113.5')), [403, 'WORKLOAD_NOT_ALLOWED'], 'a key bound to internal workloads is not reachable through the gateway')
  t.same(await dispatch(keys.acmeBrowser, SIDECAR, { ...viaGateway('203.0.113.5'), origin: 'https://app.acme.test' }), [200, 'ok'], 'a key bound to the gateway works through it')

  // A stranger outside the mesh writing the gateway's identity and an end user's address.
  const forged = viaGateway('203.0.113.6')
  t.same([await verify(STRANGER, forged), await verify(STRANGER, forged), await verify(STRANGER, forged)],
    [[400, 'CODE_MISMATCH'], [400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'a stranger forging the headers is counted by its own address')
  t.same(await verify(SIDECAR, viaGateway('203.0.113.6')), [400, 'CODE_MISMATCH'], 'and spent nothing of the end user it named')
  t.same(await dispatch(keys.acmeBrowser, STRANGER, { ...forged, origin: 'https://app.acme.test' }), [403, 'WORKLOAD_NOT_ALLOWED'], 'nor can it use the gateway\'s key')
}

t.test('through an ingress gateway: one bucket per end user, per workload for internal callers, in process', async (t) => {
  await gatewayScenario(t, {})
})

t.test('through an ingress gateway: one bucket per end user, per workload for internal callers, on a real redis-server', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  await gatewayScenario(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
})

t.test('a load balancer in front of the gateway (MESH_GATEWAY_TRUSTED_HOPS=1): the entry before its own is the end user, for buckets, block lists and logs', async (t) => {
  t.testdir({ 'blocked.txt': '203.0.113.66\n' })
  const { path, keys } = writeTenants(t)
  const built = await buildApp(t, {
    TENANTS_FILE: path,
    IP_BLOCKLISTS: `${t.testdirName}/blocked.txt`,
    TRUST_PROXY: `${SIDECAR}/32`,
    MESH_IDENTITY_HEADER: 'x-forwarded-client-cert',
    MESH_GATEWAY_IDENTITIES: GATEWAY,
    MESH_GATEWAY_TRUSTED_HOPS: '1',
    RATE_LIMIT_SOURCE: '2/1m',
    RATE_LIMIT_BACKEND: '2/1m'
  })
  const port = await listenApp(built.app)
  const verify = async (forwardedFor: string, headers: Record<string, string> = {}) => {
    const answer = await send({ port, localAddress: SIDECAR, path: '/otp/verify', headers: { ...json, ...bearer(keys.acmeTest), ...viaGateway(forwardedFor), ...headers }, body: JSON.stringify({ requestId: 'otp_unknown', userGuess: '000000' }) })
    return [answer.status, answer.body.code]
  }
  const balancer = '10.0.0.5'

  t.same([await verify(`203.0.113.1, ${balancer}`), await verify(`203.0.113.1, ${balancer}`), await verify(`203.0.113.1, ${balancer}`)],
    [[400, 'CODE_MISMATCH'], [400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'one end user reaches RATE_LIMIT_SOURCE')
  t.same(await verify(`203.0.113.2, ${balancer}`), [400, 'CODE_MISMATCH'], 'another behind the same load balancer has its own bucket')
  t.same(await verify(`203.0.113.9, 203.0.113.1, ${balancer}`), [429, 'RATE_LIMITED'], 'what the end user wrote itself is not read')
  t.match(built.logs.text, /"remoteAddress":"203\.0\.113\.2"/, 'the request line names the end user')
  t.notMatch(built.logs.text, /"remoteAddress":"10\.0\.0\.5"/, 'not the load balancer')
  t.same(await verify(`203.0.113.66, ${balancer}`), [403, 'SOURCE_BLOCKED'], 'block lists look at the end user')
  t.same(await verify(balancer), [400, 'INVALID_FORWARDED_FOR'], 'fewer entries than the load balancer and the end user: refused')

  // Partner backends behind the gateway, naming their end users: each backend its own bucket.
  const backend = async (address: string, endUser: string) => await verify(`${address}, ${balancer}`, { 'end-user-ip': endUser })
  t.same([await backend('198.51.100.10', '192.0.2.1'), await backend('198.51.100.10', '192.0.2.2'), await backend('198.51.100.10', '192.0.2.3')],
    [[400, 'CODE_MISMATCH'], [400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'a backend reaches RATE_LIMIT_BACKEND over its end users')
  t.same(await backend('198.51.100.11', '192.0.2.4'), [400, 'CODE_MISMATCH'], 'another backend behind the gateway has its own')
})

t.test('l5d-client-id: an ingress controller named as a gateway, the public routes limited per end user', async (t) => {
  const ingress = 'ingress-nginx.ingress-nginx.serviceaccount.identity.linkerd.cluster.local'
  const { app } = await buildApp(t, { TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'l5d-client-id', MESH_GATEWAY_IDENTITIES: ingress, RATE_LIMIT_PUBLIC: '1/1m' })
  const port = await listenApp(app)
  const scan = async (identity: string, forwardedFor: string) => (await send({ port, localAddress: SIDECAR, method: 'GET', path: '/nope', headers: { 'l5d-client-id': identity, 'x-forwarded-for': forwardedFor } })).status
  t.same([await scan(ingress, '203.0.113.1'), await scan(ingress, '203.0.113.1'), await scan(ingress, '203.0.113.2')], [404, 429, 404], 'per end user behind the ingress controller')
  const internal = 'web.shop.serviceaccount.identity.linkerd.cluster.local'
  t.same([await scan(internal, '203.0.113.3'), await scan(internal, '203.0.113.4')], [404, 429], 'per workload for an internal caller')
})

t.test('the refusal pace: per internal workload, and per end user behind a gateway\'s load balancer', async (t) => {
  // One refusal a second past a burst of one: of four refusals at once, two are held (up to
  // two seconds), while the first refusal of a source is never held.
  const { app } = await buildApp(t, {
    TRUST_PROXY: `${SIDECAR}/32`,
    MESH_IDENTITY_HEADER: 'x-forwarded-client-cert',
    MESH_GATEWAY_IDENTITIES: GATEWAY,
    MESH_GATEWAY_TRUSTED_HOPS: '1',
    REFUSAL_PACE_PER_SECOND: '1',
    REFUSAL_PACE_BURST: '1',
    REFUSAL_PACE_MAX_DELAY_MS: '5s'
  })
  const port = await listenApp(app)
  const refused = async (headers: Record<string, string>) => (await send({ port, localAddress: SIDECAR, path: '/otp/verify', headers: { ...json, authorization: 'Bearer not-a-key', ...headers }, body: '{}' })).status
  const flood = async (headers: Record<string, string>) => await Promise.all(Array.from({ length: 4 }, async () => await refused(headers)))
  const paced = async (): Promise<number> => {
    const answer = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
    return Number(/^email_otp_refusals_paced_total (\d+)/m.exec(answer.body)?.[1])
  }

  t.same(await flood(xfcc(`${td}/jobs/sa/worker`)), [401, 401, 401, 401])
  const afterWorker = await paced()
  t.ok(afterWorker >= 1, `a workload that keeps being refused is paced (${afterWorker} held)`)
  t.equal(await refused(xfcc(`${td}/shop/sa/frontend`)), 401)
  t.equal(await paced(), afterWorker, 'another workload behind the same sidecar address is not')

  t.same(await flood(viaGateway('203.0.113.1, 10.0.0.5')), [401, 401, 401, 401])
  const afterEndUser = await paced()
  t.ok(afterEndUser > afterWorker, `an end user who keeps being refused is paced (${afterEndUser - afterWorker} held)`)
  t.equal(await refused(viaGateway('203.0.113.2, 10.0.0.5')), 401)
  t.equal(await paced(), afterEndUser, 'another end user behind the same gateway and load balancer is not')
})

t.test('callers through the sidecar without an identity are one source, whatever X-Forwarded-For they write', async (t) => {
  for (const store of ['memory', 'redis'] as const) {
    await t.test(store, store === 'redis' ? redisTestOptions() : {}, async (t) => {
      const env: Record<string, string> = {}
      if (store === 'redis') {
        const redis = await startRedis()
        t.teardown(async () => { await redis.stop() })
        Object.assign(env, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
      }
      const { path, keys } = writeTenants(t)
      const built = await buildApp(t, { ...env, TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: GATEWAY, RATE_LIMIT_SOURCE: '2/1m', RATE_LIMIT_PUBLIC: '2/1m' })
      const port = await listenApp(built.app)
      const verify = async (from: string, headers: Record<string, string>) => {
        const answer = await send({ port, localAddress: from, path: '/otp/verify', headers: { ...json, ...bearer(keys.acmeTest), ...headers }, body: JSON.stringify({ requestId: 'otp_unknown', userGuess: '000000' }) })
        return [answer.status, answer.body.code]
      }
      const fresh = ['203.0.113.1', '203.0.113.2', '203.0.113.3'].map((address) => ({ 'x-forwarded-for': address }))
      const answers = []
      for (const headers of fresh) answers.push(await verify(SIDECAR, headers))
      t.same(answers, [[400, 'CODE_MISMATCH'], [400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'three addresses written in X-Forwarded-For, one bucket')
      t.same(await verify(SIDECAR, {}), [429, 'RATE_LIMITED'], 'and no X-Forwarded-For at all: the same bucket')
      t.same(await verify(SIDECAR, xfcc(`${td}/shop/sa/frontend`)), [400, 'CODE_MISMATCH'], 'an internal workload keeps its own')
      t.same(await verify(SIDECAR, viaGateway('203.0.113.1')), [400, 'CODE_MISMATCH'], 'and so does the end user whose address was written')
      t.same(await verify(STRANGER, { 'x-forwarded-for': '203.0.113.4' }), [400, 'CODE_MISMATCH'], 'a caller outside the mesh is counted by its own address')

      const scan = async (headers: Record<string, string>) => (await send({ port, localAddress: SIDECAR, method: 'GET', path: '/nope', headers })).status
      t.same([await scan({ 'x-forwarded-for': '198.51.100.1' }), await scan({ 'x-forwarded-for': '198.51.100.2' }), await scan({ 'x-forwarded-for': '198.51.100.3' })], [404, 404, 429], 'the public routes\' limit counts them as one too')

      t.match(built.logs.text, /"remoteAddress":"mesh:unidentified"/, 'logs name them as one source')
      t.notMatch(built.logs.text, /"remoteAddress":"203\.0\.113\.3"/, 'not by the address they wrote')
      const metrics = await built.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
      t.equal(Number(/^email_otp_mesh_unidentified_requests_total (\d+)/m.exec(metrics.body)?.[1]), 7, 'and the metric counts each of them')
    })
  }
})

t.test('a header that names the caller, sent twice, is refused as ambiguous', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: GATEWAY })
  const port = await listenApp(app)
  const verify = async (from: string, headers: Record<string, string | string[]>) => {
    const answer = await send({ port, localAddress: from, path: '/otp/verify', headers: { ...json, ...bearer(keys.acmeLive), ...headers }, body: JSON.stringify({ requestId: 'otp_unknown', userGuess: '000000' }) })
    return [answer.status, answer.body.code]
  }
  const ambiguous = [400, 'AMBIGUOUS_HEADER']
  const internal = xfcc(`${td}/shop/sa/frontend`)['x-forwarded-client-cert']!
  const gateway = xfcc(GATEWAY)['x-forwarded-client-cert']!
  t.same(await verify(SIDECAR, { 'x-forwarded-client-cert': [internal, gateway] }), ambiguous, 'the identity header twice')
  t.same(await verify(SIDECAR, { 'x-forwarded-client-cert': [gateway, internal] }), ambiguous, 'in either order')
  t.same(await verify(SIDECAR, { 'x-forwarded-client-cert': gateway, 'x-forwarded-for': ['203.0.113.1', '203.0.113.2'] }), ambiguous, 'X-Forwarded-For twice through a gateway')
  t.same(await verify(SIDECAR, { 'x-forwarded-for': ['203.0.113.1', '203.0.113.2'] }), ambiguous, 'X-Forwarded-For twice without an identity')
  t.same(await verify(SIDECAR, { 'x-forwarded-client-cert': internal, 'end-user-ip': ['192.0.2.1', '192.0.2.2'] }), ambiguous, 'End-User-IP twice through the mesh')
  t.same(await verify(STRANGER, { 'end-user-ip': ['192.0.2.1', '192.0.2.2'] }), ambiguous, 'End-User-IP twice from outside')
  t.same(await verify(SIDECAR, { 'x-forwarded-client-cert': internal, 'end-user-ip': '192.0.2.1' }), [400, 'CODE_MISMATCH'], 'each once: served')
  t.same(await verify(STRANGER, { 'x-forwarded-for': ['203.0.113.1', '203.0.113.2'], 'x-forwarded-client-cert': [internal, gateway] }), [400, 'CODE_MISMATCH'], 'from outside the mesh, headers that are not read are not judged')
})

t.test('a restricted key\'s Idempotency-Key needs a visitor the mesh can tell apart', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: GATEWAY })
  const port = await listenApp(app)
  const page = { origin: 'https://app.acme.test' }
  const dispatch = async (key: string, headers: Record<string, string>, email: string) => {
    const answer = await send({ port, localAddress: SIDECAR, path: '/otp/request', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify({ email }) })
    return [answer.status, answer.body.code ?? 'ok']
  }
  const login = { 'idempotency-key': 'login-jo@example.com' }
  t.same(await dispatch(keys.acmeBrowser, { ...page, ...login }, 'jo@example.com'), [400, 'IDEMPOTENCY_KEY_UNSCOPED'], 'through the sidecar without an identity: refused, so no stranger meets the visitor\'s record')
  t.same(await dispatch(keys.acmeBrowser, { ...page, ...login, ...xfcc(`${td}/edge/sa/ingress`), 'x-forwarded-for': '203.0.113.8' }, 'jo@example.com'), [400, 'IDEMPOTENCY_KEY_UNSCOPED'], 'through a workload not named as a gateway (every visitor one source): refused too')
  t.same(await dispatch(keys.acmeBrowser, page, 'jo@example.com'), [200, 'ok'], 'without the header: served')
  t.same(await dispatch(keys.acmeBrowser, { ...page, ...login, ...xfcc(GATEWAY), 'x-forwarded-for': '203.0.113.9' }, 'jo@example.com'), [200, 'ok'], 'through an identified gateway the visitor has its own namespace')
  t.same(await dispatch(keys.acmeLive, login, 'jo@example.com'), [200, 'ok'], 'a secret key\'s records are its backend\'s own, identity or not')
})

t.test('an internal workload\'s log lines name its identity and the bucket it is counted in, never the address it wrote', async (t) => {
  const { path, keys } = writeTenants(t)
  const built = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: GATEWAY, LOG_LEVEL: 'info' })
  const port = await listenApp(built.app)
  const verify = async (headers: Record<string, string>) => await send({ port, localAddress: SIDECAR, path: '/otp/verify', headers: { ...json, ...bearer(keys.acmeTest), ...headers }, body: JSON.stringify({ requestId: 'otp_unknown', userGuess: '000000' }) })
  const evil = `${td}/evil/sa/evil`
  t.equal((await verify({ ...xfcc(evil), 'x-forwarded-for': '8.8.8.8' })).status, 400)
  t.equal((await verify(viaGateway('203.0.113.7'))).status, 400)

  const requestLines = built.logs.lines.map((line) => JSON.parse(line)).filter((line) => line.msg === 'incoming request')
  t.match(requestLines[0]?.req, { remoteAddress: workloadBucket(evil), workload: evil }, 'the workload: its bucket and its identity')
  t.notMatch(built.logs.text, /8\.8\.8\.8/, 'the address it wrote is in no line')
  t.match(requestLines[1]?.req, { remoteAddress: '203.0.113.7', workload: GATEWAY }, 'a gateway\'s end client: its address, and the gateway that forwarded it')
})

t.test('a review address used by an internal workload is reported with the workload\'s bucket, never the address it wrote', async (t) => {
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.reviewAddresses = [{ address: 'reviewer@acme.test', codeSha256: createHash('sha256').update('424242').digest('hex'), expiresAt: new Date(Date.now() + 86_400_000).toISOString() }]
  })
  const built = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: 'none', LOG_LEVEL: 'info' })
  const port = await listenApp(built.app)
  const workload = `${td}/shop/sa/frontend`
  const answer = await send({ port, localAddress: SIDECAR, path: '/otp/request', headers: { ...json, ...bearer(keys.acmeLive), ...xfcc(workload), 'x-forwarded-for': '8.8.8.8' }, body: JSON.stringify({ email: 'reviewer@acme.test' }) })
  t.equal(answer.status, 200, JSON.stringify(answer.body))
  const used = built.logs.lines.map((line) => JSON.parse(line)).filter((line) => line.msg === 'review address used: no mail sent, nothing charged')
  t.same(used.map((line) => line.source), [workloadBucket(workload)], 'the use names the bucket the workload is counted in')
  t.notMatch(built.logs.text, /8\.8\.8\.8/, 'the address it wrote is in no line')
})
