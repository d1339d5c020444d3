import t from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { DEMO_RESTRICTED_KEY, DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'

/*
 * Every visitor of a page shares its restricted key. Idempotency records of a restricted key
 * are kept per end client (the per-source identity the abuse guard counts), so a stranger who
 * knows or guesses a visitor's Idempotency-Key gets neither the visitor's requestId nor a
 * chance to take the key first. A secret key's records stay per key (a backend may call from
 * several addresses).
 */
t.test('a restricted key\'s Idempotency-Keys are per end client; a secret key\'s per key', async (t) => {
  const { app } = await buildApp(t)
  const port = await listenApp(app)
  const dispatch = async (key: string, source: string, idempotencyKey: string, email: string) => await send({
    port,
    path: '/otp/request',
    localAddress: source,
    headers: { ...bearer(key), 'content-type': 'application/json', 'idempotency-key': idempotencyKey, ...(key === DEMO_RESTRICTED_KEY ? { origin: `http://127.0.0.1:${port}` } : {}) },
    body: JSON.stringify({ email })
  })

  const visitor = await dispatch(DEMO_RESTRICTED_KEY, '127.0.0.2', 'login-ada@example.com', 'ada@example.com')
  t.equal(visitor.status, 200)
  const again = await dispatch(DEMO_RESTRICTED_KEY, '127.0.0.2', 'login-ada@example.com', 'ada@example.com')
  t.same([again.status, again.headers['idempotent-replayed'], again.body.data.requestId], [200, 'true', visitor.body.data.requestId], 'the visitor\'s own retry is replayed')

  const stranger = await dispatch(DEMO_RESTRICTED_KEY, '127.0.0.3', 'login-ada@example.com', 'ada@example.com')
  t.equal(stranger.status, 200, 'the stranger runs afresh')
  t.equal(stranger.headers['idempotent-replayed'], undefined, 'not a replay')
  t.not(stranger.body.data.requestId, visitor.body.data.requestId, 'the visitor\'s requestId stays unknown to him')

  // Taken first by a stranger with another body: the visitor's dispatch is not refused.
  t.equal((await dispatch(DEMO_RESTRICTED_KEY, '127.0.0.3', 'login-bob@example.com', 'mallory@example.com')).status, 200)
  t.equal((await dispatch(DEMO_RESTRICTED_KEY, '127.0.0.2', 'login-bob@example.com', 'bob@example.com')).status, 200, 'no 422 IDEMPOTENCY_MISMATCH for the visitor')

  const backend = await dispatch(DEMO_SANDBOX_KEY, '127.0.0.4', 'order-1', 'ada@example.com')
  const otherHost = await dispatch(DEMO_SANDBOX_KEY, '127.0.0.5', 'order-1', 'ada@example.com')
  t.same([otherHost.headers['idempotent-replayed'], otherHost.body.data.requestId], ['true', backend.body.data.requestId], 'a secret key\'s records span its backend\'s addresses')
})

/*
 * Two visitors of one page behind one IPv6 /64 (a household, an office) reach the service
 * through an Istio ingress gateway, which names each by its own address. The per-source limits
 * count them as one bucket; their Idempotency-Key records are each its own.
 */
const SIDECAR = '127.0.0.6'
const GATEWAY = 'spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account'

t.test('a restricted key\'s records are per full address: a stranger in the visitor\'s /64 never meets them', async (t) => {
  for (const store of ['memory', 'redis'] as const) {
    await t.test(store, store === 'redis' ? redisTestOptions() : {}, async (t) => {
      const env: Record<string, string> = {}
      if (store === 'redis') {
        const redis = await startRedis()
        t.teardown(async () => { await redis.stop() })
        Object.assign(env, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
      }
      const { path, keys } = writeTenants(t)
      const { app, mail } = await buildApp(t, { ...env, TENANTS_FILE: path, TRUST_PROXY: `${SIDECAR}/32`, MESH_IDENTITY_HEADER: 'x-forwarded-client-cert', MESH_GATEWAY_IDENTITIES: GATEWAY })
      const port = await listenApp(app)
      const page = async (address: string, body: Record<string, string>, path = '/otp/request', idempotencyKey?: string) => await send({
        port,
        path,
        localAddress: SIDECAR,
        headers: {
          ...bearer(keys.acmeBrowser),
          'content-type': 'application/json',
          origin: 'https://app.acme.test',
          'x-forwarded-client-cert': `By=spiffe://cluster.local/ns/otp/sa/email-otp;URI=${GATEWAY}`,
          'x-forwarded-for': address,
          ...(idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey })
        },
        body: JSON.stringify(body)
      })
      const email = 'ada@example.com'
      const login = `login-${email}`

      const visitor = await page('2001:db8:aa:bb::10', { email }, '/otp/request', login)
      t.equal(visitor.status, 200)
      const code = mail.codeFor(email)
      const again = await page('2001:DB8:AA:BB:0:0:0:10', { email }, '/otp/request', login)
      t.same([again.headers['idempotent-replayed'], again.body.data?.requestId], ['true', visitor.body.data.requestId], 'the visitor\'s retry, its address spelled otherwise, is replayed')

      const stranger = await page('2001:db8:aa:bb:dead::99', { email }, '/otp/request', login)
      t.equal(stranger.status, 200, 'the stranger in the same /64 runs afresh')
      t.equal(stranger.headers['idempotent-replayed'], undefined, 'not a replay')
      t.not(stranger.body.data.requestId, visitor.body.data.requestId, 'the visitor\'s requestId stays unknown to the stranger')
      // What the red team did with the requestId it got back: one wrong guess, the code burnt.
      t.equal((await page('2001:db8:aa:bb:dead::99', { requestId: stranger.body.data.requestId, userGuess: '000000' }, '/otp/verify')).status, 400)
      t.equal((await page('2001:db8:aa:bb::10', { requestId: visitor.body.data.requestId, userGuess: code }, '/otp/verify')).status, 200, 'the visitor\'s code still verifies')
    })
  }
})
