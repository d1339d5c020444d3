import t from 'tap'
import { bearer, buildApp } from '../helper.js'
import { listenApp, send } from '../support/http.js'
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
