import { join } from 'node:path'
import t from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

const json = { 'content-type': 'application/json' }

t.test('a backend forwards its end users with End-User-IP', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const dir = t.testdir({ 'tor.txt': '198.51.100.66\n2001:db8:66::1\n' })
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[1]!.requireEndUserIp = true
    file.tenants[0]!.blockedNetworks = ['203.0.113.0/24']
  })
  const { app } = await buildApp(t, {
    TENANTS_FILE: path,
    REDIS_URL: redis.url,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    TOR_EXIT_LIST: join(dir, 'tor.txt'),
    RATE_LIMIT_SOURCE: '3/1m',
    RATE_LIMIT_BACKEND: '10/1m'
  })
  const port = await listenApp(app)
  const backendAddress = '127.0.0.70'
  const dispatch = async (key: string, email: string, headers: Record<string, string> = {}, localAddress = backendAddress) => await send({
    port, localAddress, path: '/otp/request', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify({ email })
  })
  const forUser = (address: string): Record<string, string> => ({ 'end-user-ip': address })

  t.test('each end user has their own per-source budget; the backend has its own, higher one', async (t) => {
    const a = []
    for (let i = 0; i < 4; i++) a.push((await dispatch(keys.acmeLive, `a${i}@example.com`, forUser('192.0.2.10'))).status)
    t.same(a, [200, 200, 200, 429], 'end user A uses up A\'s budget')
    const b = await dispatch(keys.acmeLive, 'b@example.com', forUser('192.0.2.11'))
    t.equal(b.status, 200, 'end user B, through the same backend, still has all of theirs')
    t.equal(b.headers['ratelimit-remaining'], '2', 'the headers describe B\'s bucket')
    const v6 = await dispatch(keys.acmeLive, 'c@example.com', forUser('2001:db8:1:2::abcd'))
    const sameNetwork = await dispatch(keys.acmeLive, 'c2@example.com', forUser('2001:db8:1:2::ef'))
    t.same([v6.status, sameNetwork.headers['ratelimit-remaining']], [200, '1'], 'IPv6 end users are bucketed by /64, as sockets are')
    // Six requests reached the backend's bucket: A's fourth stopped at A's own limit.
    const rest = []
    for (let i = 0; i < 5; i++) rest.push((await dispatch(keys.acmeLive, `d${i}@example.com`, forUser(`192.0.2.${20 + i}`))).status)
    t.same(rest, [200, 200, 200, 200, 429], 'the backend\'s own ceiling (10 a minute here, 6000 by default) holds over all its users')
    const limited = await dispatch(keys.acmeLive, 'e@example.com', forUser('192.0.2.30'))
    t.match(limited.body.message, /backend/)
  })

  t.test('block lists apply to the end user, not to the backend', async (t) => {
    const tor = await dispatch(keys.acmeTest, 'x@example.com', forUser('198.51.100.66'), '127.0.0.71')
    t.same([tor.status, tor.body.code], [403, 'SOURCE_BLOCKED'], 'an end user on a Tor exit, relayed by the partner')
    const torV6 = await dispatch(keys.acmeTest, 'x@example.com', forUser('2001:DB8:66:0::1'), '127.0.0.71')
    t.equal(torV6.status, 403, 'in any spelling')
    const tenantList = await dispatch(keys.acmeTest, 'x@example.com', forUser('203.0.113.9'), '127.0.0.71')
    t.same([tenantList.status, tenantList.body.code], [403, 'SOURCE_BLOCKED'], 'and the tenant\'s own blockedNetworks')
  })

  t.test('only a secret key may name an end user, with one well-formed address', async (t) => {
    const page = await dispatch(keys.acmeBrowser, 'p@example.com', { ...forUser('192.0.2.50'), origin: 'https://app.acme.test' }, '127.0.0.72')
    t.same([page.status, page.body.code], [400, 'END_USER_IP_NOT_ALLOWED'], 'a restricted key cannot choose its own source')
    // Each from its own address: refusals count against the sender's own source bucket.
    for (const [index, bad] of ['192.0.2', '192.0.2.1:80', '0x7f.0.0.1', 'unknown', '1.2.3.4, 5.6.7.8', ''].entries()) {
      const answer = await dispatch(keys.acmeTest, 'p@example.com', forUser(bad), `127.0.0.${90 + index}`)
      t.same([answer.status, answer.body.code], [400, 'INVALID_END_USER_IP'], JSON.stringify(bad))
    }
    const twice = await send({
      port, localAddress: '127.0.0.99', path: '/otp/request', headers: { ...json, ...bearer(keys.acmeTest), 'end-user-ip': ['192.0.2.1', '192.0.2.2'] }, body: JSON.stringify({ email: 'p@example.com' })
    })
    t.same([twice.status, twice.body.code], [400, 'AMBIGUOUS_HEADER'], 'two headers name two end users: refused as ambiguous')
  })

  t.test('a tenant can require it of its secret keys', async (t) => {
    const missing = await dispatch(keys.globexTest, 'g@example.com', {}, '127.0.0.73')
    t.same([missing.status, missing.body.code], [400, 'END_USER_IP_REQUIRED'])
    t.equal((await dispatch(keys.globexTest, 'g@example.com', forUser('192.0.2.80'), '127.0.0.73')).status, 200)
    const verify = await send({
      port, localAddress: '127.0.0.73', path: '/otp/verify', headers: { ...json, ...bearer(keys.globexTest) }, body: JSON.stringify({ requestId: 'otp_x', userGuess: '123456' })
    })
    t.same([verify.status, verify.body.code], [400, 'END_USER_IP_REQUIRED'], 'on verify too')
  })
})
