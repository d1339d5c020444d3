/*
 * Workload identity through a "sidecar": the service listens on loopback, and 127.0.0.6 (the
 * address Istio's sidecar connects from) is the only TRUST_PROXY peer. Every request is a real
 * socket from a real source address; the stores are the in-process one and a redis-server.
 */
import t, { type Test } from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

const SIDECAR = '127.0.0.6'
const STRANGER = '127.0.0.7'
const td = 'spiffe://cluster.local/ns'
const json = { 'content-type': 'application/json' }
const xfcc = (uri: string): Record<string, string> => ({ 'x-forwarded-client-cert': `By=${td}/otp/sa/email-otp;Hash=9f86d081884c7d65;Subject="CN=client, O=\\"Acme\\"";URI=${uri}` })

async function scenario (t: Test, store: Record<string, string>): Promise<void> {
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.keys[0]!.workloads = [`${td}/payments/sa/api`, `${td}/jobs/sa/*`]
  })
  const { app } = await buildApp(t, { ...store, TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', RATE_LIMIT_SOURCE: '2/1m' })
  const port = await listenApp(app)
  const dispatch = async (key: string, from: string, headers: Record<string, string>, email = 'jo@example.com') =>
    await send({ port, localAddress: from, path: '/otp/request', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify({ email }) })
  const verify = async (key: string, from: string, headers: Record<string, string>) =>
    await send({ port, localAddress: from, path: '/otp/verify', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify({ requestId: 'otp_unknown', userGuess: '000000' }) })
  const outcome = (answer: { status: number, body: any }) => [answer.status, answer.body.code ?? 'ok']

  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, xfcc(`${td}/payments/sa/api`), 'a@example.com')), [200, 'ok'], 'a bound key from its workload')
  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, xfcc(`${td}/jobs/sa/nightly`), 'b@example.com')), [200, 'ok'], 'from a service account of its namespace')
  t.same(outcome(await dispatch(keys.acmeLive, SIDECAR, xfcc(`${td}/web/sa/frontend`))), [403, 'WORKLOAD_NOT_ALLOWED'], 'from another workload')
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
  // The dispatch above without an identity counted once in the sidecar address's bucket.
  t.same([outcome(await verify(keys.acmeTest, SIDECAR, {})), outcome(await verify(keys.acmeTest, SIDECAR, {}))], [[400, 'CODE_MISMATCH'], [429, 'RATE_LIMITED']], 'callers without an identity share the sidecar address\'s bucket')
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
  const { app } = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'l5d-client-id', RATE_LIMIT_PUBLIC: '1/1m' })
  const port = await listenApp(app)
  const usage = async (headers: Record<string, string>) => (await send({ port, localAddress: SIDECAR, method: 'GET', path: '/usage', headers: { ...bearer(keys.acmeLive), ...headers } })).status
  t.equal(await usage(linkerd('api')), 200)
  t.equal(await usage(linkerd('web')), 403)
  t.equal(await usage({ 'x-forwarded-client-cert': 'URI=api.payments.serviceaccount.identity.linkerd.cluster.local' }), 403, 'only the configured header is read')
  t.equal((await send({ port, localAddress: SIDECAR, method: 'GET', path: '/usage', headers: { ...bearer(keys.acmeLive), 'l5d-client-id': 'two words' } })).body.code, 'INVALID_WORKLOAD_IDENTITY')

  const scan = async (headers: Record<string, string>) => (await send({ port, localAddress: SIDECAR, method: 'GET', path: '/nope', headers })).status
  t.same([await scan(linkerd('a')), await scan(linkerd('a')), await scan(linkerd('b'))], [404, 429, 404], 'the public routes\' per-source limit counts per workload')
})
