import t, { type Test } from 'tap'
import { Cluster } from 'ioredis'
import { TAG_KEY_FINGERPRINT, TAG_KEY_FINGERPRINT_COPIES } from '../../lib/state/redis/keys.js'
import { EvictionPolicyWatch } from '../../lib/state/redis/eviction-policy.js'
import { RedisServerWatch } from '../../lib/state/redis/server-check.js'
import { tagKeyFingerprint } from '../../lib/recipients/tag.js'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, writeTenants, type TestApp } from '../helper.js'
import { ask, startCluster, topologyTestOptions, type ClusterShard, type RedisClusterSet } from '../support/redis-topologies.js'
import { until } from '../support/wait.js'

/*
 * Readiness on a real three-primary Cluster with a primary down: the recipient tag key's
 * fingerprint has a copy on every primary, and each reading of a node is bounded. Apart from
 * test/server/redis-cluster.test.ts so that each file, with a Cluster of its own, stays well
 * within tap's per-file timeout on a busy machine.
 */

const OTHER_SECRET = Buffer.alloc(32, 9).toString('base64')
/** How long the service and the test's client wait for a frozen primary's reply: the longest command timeout the service takes, far from the readiness bound. */
const FROZEN_WAIT_MS = 10_000

// 114 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

/**
 * How long to wait for the service to see a primary that was frozen answer again: its client
 * reconnects and retries on its own timers, which a busy 2-core machine (CI with the whole
 * suite) stretched past the default 20 s stall guard.
 */
const THAWED_MS = 90_000

t.test('Cluster', topologyTestOptions(), async (t) => {
  const cluster = await startCluster()
  t.teardown(cluster.stop)
  // Through each primary the Cluster names now.
  const flush = async (): Promise<void> => {
    await Promise.all((await cluster.shards()).map(async ({ primary }) => await ask(primary.port, 'FLUSHALL')))
  }

  // A copy of the fingerprint on every primary, so that one primary down hides none of the verdict.
  t.test('tag key fingerprint copies', async (t) => {
    const inspect = await connectCluster(t, cluster)
    const copies = [TAG_KEY_FINGERPRINT, ...TAG_KEY_FINGERPRINT_COPIES]
    const stored = async (): Promise<Array<string | null>> => await Promise.all(copies.map(async (key) => await inspect.get(key)))
    const shardPorts = new Map(await Promise.all(copies.map(async (key) => [key, (await cluster.shardOf(key)).primary.port] as const)))
    const legacy = await cluster.shardOf(TAG_KEY_FINGERPRINT)
    const acme = await cluster.shardOf('otp:{acme:live}:x')
    // Another primary than the legacy key's, holding copies of its own.
    const away = (await cluster.shards()).find((shard) => shard.primary !== legacy.primary && shard.primary !== acme.primary)
    if (away === undefined || acme.primary === legacy.primary) throw new Error('test setup: acme\'s codes and the legacy fingerprint on two primaries of three')
    const frozen = (t: Test, shard: ClusterShard): () => void => {
      shard.primary.freeze()
      let thawed = false
      const thaw = (): void => {
        if (!thawed) shard.primary.thaw()
        thawed = true
      }
      t.teardown(thaw)
      return thaw
    }
    const refusal = /^RECIPIENT_TAG_KEY is not the key this Redis's suppressions, lockouts and recipient counts were written under/
    const otherKey = { OTP_HMAC_KEYS: `k2:${OTHER_SECRET}` }
    const otherFingerprint = tagKeyFingerprint(Buffer.from(OTHER_SECRET, 'base64'))
    t.beforeEach(async () => { await flush() })

    t.test('the copies\' names: a slot every 1024, a copy on each primary once an instance started', async (t) => {
      t.same(await Promise.all(TAG_KEY_FINGERPRINT_COPIES.map(async (key) => Number(await ask(legacy.primary.port, 'CLUSTER', 'KEYSLOT', key)))),
        TAG_KEY_FINGERPRINT_COPIES.map((_, i) => i * 1024))
      const { path } = writeTenants(t)
      const { app } = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })
      // A copy that answers past the per-node bound at start is recorded on a later check (see
      // TagKeyGuard): readiness checks until every copy holds a fingerprint.
      await until('every copy recorded', async () => {
        await readiness(app)
        return (await stored()).every((fingerprint) => fingerprint !== null)
      })
      const [fingerprint] = await stored()
      t.match(fingerprint, /^[A-Za-z0-9_-]{16}$/)
      t.same(await stored(), copies.map(() => fingerprint), 'the legacy key and every copy')
      t.same(new Set(shardPorts.values()).size, 3, 'on all three primaries')
      t.same(await Promise.all(copies.map(async (key) => await inspect.pttl(key))), copies.map(() => -1), 'kept as long as the data they guard')
    })

    t.test('the legacy key\'s primary frozen at a fresh instance\'s start: ready, a tenant of another primary served', async (t) => {
      const { path, keys } = writeTenants(t)
      const env = { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path }
      await (await buildApp(t, env)).app.close()
      const thaw = frozen(t, legacy)
      const built = await buildApp(t, env)
      await until('the app connected to the Cluster', () => built.app.redis?.status === 'ready')
      const ready = await readiness(built.app)
      t.equal(ready.status, 200, `ready: ${String(ready.body.checks?.tokenStore?.reason)}`)
      const sent = await built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'legacy-frozen@example.com' } })
      t.equal(sent.statusCode, 200, 'acme, on another primary, is served')
      thaw()
    })

    t.test('an empty Cluster with the legacy key\'s primary frozen: nothing recorded, not ready; the legacy key first once it answers', async (t) => {
      const { path } = writeTenants(t)
      const thaw = frozen(t, legacy)
      const built = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })
      await until('the app connected to the Cluster', () => built.app.redis?.status === 'ready')
      for (let i = 0; i < 3; i++) t.equal((await readiness(built.app)).status, 503, 'not ready while the legacy key is silent')
      // Another instance that heard from other primaries than this one must race for the same key.
      const others = copies.filter((key) => shardPorts.get(key) !== legacy.primary.port)
      t.same(await Promise.all(others.map(async (key) => await inspect.get(key))), others.map(() => null), 'no copy recorded on the primaries that answered')
      thaw()
      await until('every copy recorded once the legacy key answers', async () => {
        await readiness(built.app)
        return (await stored()).every((fingerprint) => fingerprint !== null)
      }, THAWED_MS)
      t.equal((await readiness(built.app)).status, 200, 'ready')
      const [first] = await stored()
      t.same(await stored(), copies.map(() => first), 'one fingerprint in the legacy key and every copy')
    })

    t.test('another tag key while a primary is frozen: never ready, the refusal names RECIPIENT_TAG_KEY', async (t) => {
      const { path } = writeTenants(t)
      await (await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })).app.close()
      const before = await stored()
      for (const shard of [legacy, away]) {
        const thaw = frozen(t, shard)
        // Refused at start when the client is connected by then; otherwise not ready from the
        // first check that reads a copy, for the same reason.
        const outcome = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, ...otherKey, TENANTS_FILE: path }).catch((error: unknown) => error)
        if (outcome instanceof Error) {
          t.match(outcome, { name: 'ConfigError', variable: 'RECIPIENT_TAG_KEY' }, `refused at start, ${shard === legacy ? 'the legacy key\'s' : 'another'} primary frozen`)
        } else {
          const { app } = outcome as TestApp
          await until('the other key refused', async () => refusal.test((await readiness(app)).body.checks.tokenStore.reason ?? ''))
          for (let i = 0; i < 3; i++) {
            const ready = await readiness(app)
            t.equal(ready.status, 503)
            t.match(ready.body.checks.tokenStore.reason, refusal)
          }
        }
        thaw()
      }
      t.same(await stored(), before, 'no copy changed')
    })

    t.test('a primary silent at start that answers with another key\'s copies: the instance turns not ready, logged', async (t) => {
      const { path } = writeTenants(t)
      const stranger = 'AAAAAAAAAAAAAAAA'
      const held = copies.filter((key) => shardPorts.get(key) === away.primary.port)
      t.ok(held.length > 0, `${held.length} copies on that primary`)
      for (const key of held) await inspect.set(key, stranger)
      const thaw = frozen(t, away)
      const built = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })
      await until('the app connected to the Cluster', () => built.app.redis?.status === 'ready')
      const ready = await readiness(built.app)
      t.equal(ready.status, 200, `ready on the copies that answer: ${String(ready.body.checks?.tokenStore?.reason)}`)
      thaw()
      await until('the instance not ready', async () => (await readiness(built.app)).status === 503, THAWED_MS)
      const after = await readiness(built.app)
      t.match(after.body.checks.tokenStore.reason, new RegExp(`^RECIPIENT_TAG_KEY is not the key this Redis's suppressions, lockouts and recipient counts were written under \\(fingerprint ${stranger};`))
      const logged = built.logs.lines.map((line) => JSON.parse(line)).filter((line) => line.level === 50 && /^RECIPIENT_TAG_KEY is not the key/.test(line.msg))
      t.equal(logged.length, 1, 'the refusal logged once')
      t.same(await Promise.all(held.map(async (key) => await inspect.get(key))), held.map(() => stranger), 'the other key\'s copies are left as they are')
    })

    t.test('RECIPIENT_TAG_KEY_ACCEPT replaces every copy, a frozen primary\'s once it answers', async (t) => {
      const { path } = writeTenants(t)
      await (await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })).app.close()
      const thaw = frozen(t, away)
      const built = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, ...otherKey, RECIPIENT_TAG_KEY_ACCEPT: otherFingerprint, TENANTS_FILE: path })
      await until('the app connected to the Cluster', () => built.app.redis?.status === 'ready')
      t.equal((await readiness(built.app)).status, 200, 'accepted on the copies that answer')
      thaw()
      await until('every copy replaced', async () => {
        await readiness(built.app)
        return (await stored()).every((fingerprint) => fingerprint === otherFingerprint)
      })
      t.equal(built.logs.lines.filter((line) => line.includes('RECIPIENT_TAG_KEY_ACCEPT: the recipient tag key was replaced')).length, 1, 'logged once')
      await t.rejects(buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path }), { name: 'ConfigError', variable: 'RECIPIENT_TAG_KEY' }, 'and the old key is the stranger now')
    })

    t.test('two instances with different keys starting together on an empty Cluster: never both ready', async (t) => {
      const { path } = writeTenants(t)
      for (let round = 0; round < 3; round++) {
        await flush()
        const outcomes = await Promise.all([TEST_HMAC_KEYS, `k2:${OTHER_SECRET}`].map(async (hmacKeys) => {
          const built = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: hmacKeys, TENANTS_FILE: path }).catch(() => null)
          if (built === null) return 503
          // Ready, or refused for the other's key: an instance whose first reads came late is neither yet.
          let ready = await readiness(built.app)
          await until('a verdict', async () => {
            ready = await readiness(built.app)
            return ready.status === 200 || refusal.test(ready.body.checks.tokenStore.reason ?? '')
          })
          return ready.status
        }))
        t.equal(outcomes.filter((status) => status === 200).length, 1, `one of them ready: ${outcomes.join(' ')}`)
        const fingerprints = new Set(await stored())
        t.equal(fingerprints.size, 1, 'every copy holds one key\'s fingerprint')
      }
    })
  })

  t.test('readiness with a primary frozen answers within the bound, whatever the command timeout', async (t) => {
    await flush()
    const { path } = writeTenants(t)
    const acme = await cluster.shardOf('otp:{acme:live}:x')
    const other = (await cluster.shards()).find((shard) => shard.primary !== acme.primary)
    if (other === undefined) throw new Error('test setup: one primary')
    const env = { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_COMMAND_TIMEOUT_MS: `${FROZEN_WAIT_MS}ms` }
    const inspect = await connectCluster(t, cluster, FROZEN_WAIT_MS)
    // Started with every primary answering: which node a starting Cluster client asks first
    // is ioredis's choice, and a frozen one costs start-up its connect timeout.
    const built = await buildApp(t, env)
    await until('the app connected to the Cluster', () => built.app.redis?.status === 'ready')
    const readAt = Date.now()
    // The watchers as the service builds them, without their 5 s reading, on a client that waits 10 s for a reply.
    const log = { error: () => {}, warn: () => {}, info: () => {} }
    const eviction = new EvictionPolicyWatch(inspect, log, { cacheMs: 0 })
    const servers = new RedisServerWatch(inspect, { topology: null, requiredAcks: 1, connectTimeoutMs: 1000, log, cacheMs: 0 })
    t.same((await eviction.check()).policies, ['noeviction', 'noeviction', 'noeviction'])
    other.primary.freeze()
    let frozen = true
    t.teardown(() => { if (frozen) other.primary.thaw() })
    const timed = async <T>(what: string, check: () => Promise<T>): Promise<T> => {
      const started = Date.now()
      const result = await check()
      // Within the readiness bound (READINESS_READ_MS), not the command timeout: half of that, so no machine's speed decides.
      t.ok(Date.now() - started < FROZEN_WAIT_MS / 2, `${what} answered in ${Date.now() - started} ms`)
      return result
    }
    for (let i = 0; i < 2; i++) {
      t.same((await timed('INFO memory', async () => await eviction.check())).policies, ['noeviction', 'noeviction', 'noeviction'], 'the frozen primary counts with its last reading')
      t.equal((await timed('INFO', async () => await servers.check())).replicas?.connected, 0)
    }
    // The app's own readings from its start stand 5 s: past them, each check reads the nodes again.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, readAt + 5100 - Date.now())))
    for (let i = 0; i < 2; i++) {
      const ready = await timed('/readyz', async () => await readiness(built.app))
      t.equal(ready.status, 200)
    }
    other.primary.thaw()
    frozen = false
  })
})

/** A client of the test's own on the Cluster as it is now, waiting `commandTimeout` for a reply; disconnected when the test ends. */
async function connectCluster (t: Test, cluster: RedisClusterSet, commandTimeout = 5000): Promise<Cluster> {
  const client = new Cluster((await cluster.shards()).map(({ primary }) => ({ host: '127.0.0.1', port: primary.port })), {
    enableOfflineQueue: false,
    scaleReads: 'master',
    redisOptions: { maxRetriesPerRequest: 0, commandTimeout }
  })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  await until('the test\'s client connected to the Cluster', () => client.status === 'ready')
  return client
}
