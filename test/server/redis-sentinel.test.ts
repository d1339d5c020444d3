import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { ConfigError, parseConfig } from '../../lib/config/from-env.js'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants, assertStartsUnavailable } from '../helper.js'
import { freePort } from '../support/redis.js'
import { startSentinelSet, topologyTestOptions } from '../support/redis-topologies.js'

t.test('configuration: Sentinels need the primary name, and the name needs Sentinels', async (t) => {
  t.strictSame(parseConfig({ REDIS_SENTINELS: 's1:26379,s2:26380', REDIS_SENTINEL_NAME: 'otp-primary', OTP_HMAC_KEYS: TEST_HMAC_KEYS }).redis, {
    kind: 'sentinel',
    sentinels: [{ host: 's1', port: 26379 }, { host: 's2', port: 26380 }],
    name: 'otp-primary',
    username: null,
    password: null,
    tls: false
  })
  const cases: Array<[Record<string, string>, string, RegExp]> = [
    [{ REDIS_SENTINELS: 's1:26379' }, 'REDIS_SENTINEL_NAME', /REDIS_SENTINEL_NAME is required when REDIS_SENTINELS is set/],
    [{ REDIS_SENTINEL_NAME: 'otp-primary' }, 'REDIS_SENTINEL_NAME', /REDIS_SENTINEL_NAME is only used with REDIS_SENTINELS/],
    [{ REDIS_SENTINELS: 's1', REDIS_SENTINEL_NAME: 'otp-primary' }, 'REDIS_SENTINELS', /host:port pairs/],
    [{ REDIS_SENTINELS: 's1:26379', REDIS_SENTINEL_NAME: 'otp primary' }, 'REDIS_SENTINEL_NAME', /must be one word, without spaces/],
    [{ REDIS_URL: 'redis://r', REDIS_SENTINELS: 's1:26379', REDIS_SENTINEL_NAME: 'otp-primary' }, 'REDIS_SENTINELS', /cannot be combined with REDIS_URL/]
  ]
  for (const [env, variable, message] of cases) {
    const error = t.throws(() => parseConfig({ OTP_HMAC_KEYS: TEST_HMAC_KEYS, ...env })) as ConfigError
    t.ok(error instanceof ConfigError, JSON.stringify(env))
    t.equal(error.variable, variable)
    t.match(error.message, message)
  }
  t.throws(() => parseConfig({ REDIS_SENTINELS: 's1:26379', REDIS_SENTINEL_NAME: 'otp-primary' }), /OTP_HMAC_KEYS is required when REDIS_SENTINELS is set/)
})

/**
 * How long the service may take to follow the failover. Sentinel itself needs about 2-4 s
 * (2.8 s at a load of 13-18); what this catches is a service that never follows, so the bound
 * sits at over ten times that, far from any machine's speed.
 */
const RECOVERY_BOUND_MS = 60_000
/** Cycles in a row that must come out right before the service counts as recovered. */
const HEALTHY_CYCLES = 10

t.test('Redis Sentinel: the primary dies; 503 meanwhile, never 500 or a wrong answer; recovery by itself', topologyTestOptions(), async (t) => {
  const set = await startSentinelSet()
  t.teardown(set.stop)
  const { path, keys } = writeTenants(t)
  const { app, mail, logs } = await buildApp(t, { REDIS_SENTINELS: set.sentinels, REDIS_SENTINEL_NAME: set.name, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })
  const dispatch = async (email: string) => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email } })
  const verify = async (requestId: string, userGuess: string) => await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess } })
  const wrong = (code: string): string => String((Number(code) + 1) % 1e6).padStart(6, '0')

  t.ok(app.redis instanceof Redis, 'one connection, to the primary')
  t.equal(app.redis?.status, 'ready', 'ready once boot is done')
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200)
  const first = await dispatch('first@example.com')
  t.equal(first.statusCode, 200)
  t.equal((await verify(first.json().data.requestId, mail.codeFor('first@example.com'))).statusCode, 200)
  t.equal((await verify(first.json().data.requestId, mail.codeFor('first@example.com'))).statusCode, 400, 'a code works once')

  // A code the replica holds before the kill must survive the failover. (One still in flight
  // to the replica could be lost: replication is asynchronous. Waiting rules that out.)
  const pending = await dispatch('pending@example.com')
  t.equal(pending.statusCode, 200)
  await set.replicated()

  await set.primary.stop()
  const killed = Date.now()
  const seen: Record<string, number> = {}
  let healthy = 0
  let cycle = 0
  while (healthy < HEALTHY_CYCLES && Date.now() - killed < RECOVERY_BOUND_MS) {
    cycle++
    const email = `cycle${cycle}@example.com`
    const sent = await dispatch(email)
    seen[`dispatch ${sent.statusCode}`] = (seen[`dispatch ${sent.statusCode}`] ?? 0) + 1
    if (sent.statusCode !== 200) {
      if (sent.statusCode !== 503) t.fail(`dispatch answered ${sent.statusCode}: ${sent.body}`)
      healthy = 0
      await sleep(100)
      continue
    }
    // This dispatch answered 200 after the kill, so its token is on the new primary: the
    // right code must verify and a wrong one must not, unless Redis is unavailable (503).
    const right = cycle % 2 === 0
    const code = mail.codeFor(email)
    const checked = await verify(sent.json().data.requestId, right ? code : wrong(code))
    const expected = right ? 200 : 400
    seen[`verify ${checked.statusCode}`] = (seen[`verify ${checked.statusCode}`] ?? 0) + 1
    if (checked.statusCode !== expected && checked.statusCode !== 503) {
      t.fail(`a ${right ? 'right' : 'wrong'} code answered ${checked.statusCode}: ${checked.body}`)
    }
    healthy = checked.statusCode === expected ? healthy + 1 : 0
  }
  const recoveredMs = Date.now() - killed
  t.ok(healthy >= HEALTHY_CYCLES, `recovered by itself after ${recoveredMs} ms (${cycle} cycles: ${JSON.stringify(seen)})`)
  if (healthy < HEALTHY_CYCLES) t.comment(`client ${app.redis?.status ?? 'none'}; Sentinel log:\n${set.sentinel.log()}`)
  t.ok((seen['dispatch 503'] ?? 0) > 0, 'the switch was seen as 503')
  t.equal(await set.primaryPort(), set.replica.port, 'the Sentinel promoted the replica')
  t.equal((await verify(pending.json().data.requestId, mail.codeFor('pending@example.com'))).statusCode, 200, 'a code replicated before the kill still verifies')
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200)
  t.match(logs.text, /redis connection lost[\s\S]*redis connection restored/, 'the outage and the recovery are logged')
})

t.test('start-up with no Sentinel reachable: bounded, not ready, 503', topologyTestOptions(), async (t) => {
  await assertStartsUnavailable(t, { REDIS_SENTINELS: `127.0.0.1:${await freePort()}`, REDIS_SENTINEL_NAME: 'mymaster' })
})
