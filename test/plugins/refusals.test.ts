import t from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'

const json = { 'content-type': 'application/json' }

t.test('refused requests count against the caller\'s limits, over real sockets, on Redis', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, RATE_LIMIT_SOURCE: '5/1m', RATE_LIMIT_KEY: '8/1m' })
  const port = await listenApp(app)
  const dispatch = async (localAddress: string, body: unknown) => await send({
    port, localAddress, path: '/otp/request', headers: { ...json, ...bearer(keys.acmeLive) }, body: JSON.stringify(body)
  })

  const attacker = '127.0.0.21'
  const statuses = []
  statuses.push((await dispatch(attacker, { email: 'not an address' })).status)
  statuses.push((await dispatch(attacker, { email: 'someone@mailinator.com' })).status)
  statuses.push((await dispatch(attacker, { email: 'a@example.com', extra: 1 })).status)
  statuses.push((await dispatch(attacker, { email: 'user@localhost' })).status)
  statuses.push((await dispatch(attacker, { email: 'nope' })).status)
  t.same(statuses, [400, 403, 400, 400, 400], 'five refusals, each for its own reason')
  const sixth = await dispatch(attacker, { email: 'still not an address' })
  t.same([sixth.status, sixth.body.code], [429, 'RATE_LIMITED'], 'the sixth request of the minute is past the source\'s limit')
  t.ok(Number(sixth.headers['retry-after']) > 0, 'with Retry-After')
  const valid = await dispatch(attacker, { email: 'real@example.com' })
  t.equal(valid.status, 429, 'refusals used the source\'s budget for valid requests too')

  for (let i = 0; i < 20; i++) await dispatch(attacker, { email: 'junk' })
  const other = await dispatch('127.0.0.22', { email: 'bob@example.com' })
  t.equal(other.status, 200, 'the flood counted against its own source only: other sources go on')
  const client = await connectFailFast(redis.url)
  t.teardown(() => { client.disconnect() })
  t.equal(await client.get('rl:k:{acme:live}:acme_live'), '1', 'the key\'s bucket holds this dispatch only: refusals never reach it')
})
