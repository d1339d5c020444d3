/*
 * Redis frozen (SIGSTOP) and thawed over and over under concurrent load: freezes shorter and
 * longer than the command timeout, so that scripts reach Redis before, around and after the
 * deadline their caller gave them. Afterwards the state in Redis must match every answer: the
 * tenant charged exactly for the dispatches answered 200, a code in Redis for each of those not
 * verified and for nothing else, every verify answered 503 verifying on retry, no code
 * verifying twice; and a 503 comes after one command timeout, not one per command.
 */
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { FaultLoad } from '../support/faults.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { until } from '../support/wait.js'

const TIMEOUT_MS = 200
const LOAD_MS = 15_000
const WORKERS = 16

function percentile (sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0
}

t.test(`Redis frozen and thawed for ${LOAD_MS / 1000} s under ${WORKERS} concurrent clients: the answers match the state`, redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t, (file) => { file.tiers = { standard: { allowance: 1_000_000, window: '1d', sandboxAllowance: 1000 } } })
  const app = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_COMMAND_TIMEOUT_MS: String(TIMEOUT_MS), LOG_LEVEL: 'fatal' })
  await until('the app connected to Redis', () => app.app.redis?.status === 'ready')
  const load = new FaultLoad(app, keys.acmeLive)

  const end = Date.now() + LOAD_MS
  let freezes = 0
  const freezer = (async () => {
    while (Date.now() < end) {
      await sleep(100 + Math.random() * 400)
      redis.freeze()
      freezes++
      await sleep(50 + Math.random() * 2 * TIMEOUT_MS)
      redis.thaw()
    }
  })()
  await Promise.all([freezer, ...Array.from({ length: WORKERS }, async () => {
    while (Date.now() < end) {
      const [issued] = Math.random() < 0.4 ? load.takeOutstanding(1) : []
      if (issued === undefined) await load.dispatch()
      else await load.verify(issued)
    }
  })])

  const statuses = Object.fromEntries(load.statuses)
  const unavailable = [...load.unavailableMs].sort((a, b) => a - b)
  t.comment(`${freezes} freezes; answers ${JSON.stringify(statuses)}; 503 in ms: median ${percentile(unavailable, 0.5)}, p99 ${percentile(unavailable, 0.99)}, max ${unavailable.at(-1) ?? 0}`)
  t.same(Object.keys(statuses).filter((name) => !/ (200|503)$/.test(name)), [], 'every answer is 200 or 503')
  t.ok((load.statuses.get('dispatch 503') ?? 0) > 0 && (load.statuses.get('verify 503') ?? 0) > 0, 'the freezes were met')
  // Room for a busy machine (the load runs in this process): one timeout per request, where there were two.
  t.ok(percentile(unavailable, 0.5) < 1.5 * TIMEOUT_MS, `a 503 takes one command timeout, not one per command (median ${percentile(unavailable, 0.5)} ms)`)
  await load.check(t, redis.url)
})
