import t from 'tap'
import { Redis } from 'ioredis'
import { buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { FaultLoad } from '../support/faults.js'
import { startRedis } from '../support/redis.js'
import { startSentinelSet, topologyTestOptions } from '../support/redis-topologies.js'
import { until } from '../support/wait.js'

/*
 * The primary dies while its replica lags behind: its link to the replica is cut and the
 * replica cannot reconnect (maxclients), then the primary is killed and Sentinel promotes the
 * replica, which never saw the writes of that window. With REDIS_REPLICA_ACKS=1 no request of
 * that window may answer 200: a code verified there would verify again on the promoted
 * replica, a code dispatched there would be missing from it.
 */
t.test('Sentinel failover after the replica lagged: single use holds, no code answered 200 is lost', topologyTestOptions(), async (t) => {
  const set = await startSentinelSet()
  t.teardown(set.stop)
  const { path, keys } = writeTenants(t)
  const app = await buildApp(t, { REDIS_SENTINELS: set.sentinels, REDIS_SENTINEL_NAME: set.name, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_REPLICA_ACKS: '1', REDIS_REPLICA_ACK_TIMEOUT_MS: '100' })
  await until('the app connected to Redis', () => app.app.redis?.status === 'ready')
  const admin = new Redis({ port: set.primary.port, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => null })
  admin.on('error', () => {})
  t.teardown(() => { admin.disconnect() })
  await until('the replica online', async () => /slave0:.*state=online/.test(await admin.info('replication')))
  const load = new FaultLoad(app, keys.acmeLive)
  t.same([...new Set(await Promise.all(Array.from({ length: 30 }, async () => await load.dispatch())))], [200])
  t.same([...new Set(await Promise.all(load.takeOutstanding(5).map(async (issued) => await load.verify(issued))))], [200])
  await set.replicated()

  // The replica falls behind: its link is cut and it cannot come back.
  // One less than now: once the replica's link is gone, no new connection is taken.
  const connected = Number(/^connected_clients:(\d+)/m.exec(await admin.info('clients'))?.[1])
  await admin.config('SET', 'maxclients', String(connected - 1))
  await admin.call('CLIENT', 'KILL', 'TYPE', 'replica')
  const lagging = await Promise.all([
    ...Array.from({ length: 10 }, async () => await load.dispatch()),
    ...load.takeOutstanding(10).map(async (issued) => await load.verify(issued))
  ])
  t.same([...new Set(lagging)], [503], 'while no replica acknowledges, dispatch and verify answer 503')

  await set.primary.stop()
  await until('the Sentinel promoting the replica', async () => await set.primaryPort() === set.replica.port, 30_000)
  await until('the app on the new primary', async () => {
    try {
      return await app.app.redis?.call('ROLE').then((role) => Array.isArray(role) && role[0] === 'master') ?? false
    } catch {
      return false
    }
  }, 30_000)
  // The new primary needs a replica of its own to acknowledge: a fresh one, in the test's
  // directory (a replica writes the snapshot it receives where it runs).
  const spare = await startRedis(['--replicaof', '127.0.0.1', String(set.replica.port), '--dir', t.testdirName])
  t.teardown(async () => { await spare.stop() })
  const promoted = new Redis({ port: set.replica.port, host: '127.0.0.1', maxRetriesPerRequest: 0 })
  promoted.on('error', () => {})
  t.teardown(() => { promoted.disconnect() })
  await until('the spare replicating the new primary', async () => /slave0:.*state=online/.test(await promoted.info('replication')), 30_000)
  // On the promoted replica: charges and codes match the 200s, each verify answered 503
  // verifies on retry, and a code verified before never verifies again.
  await load.check(t, `redis://127.0.0.1:${set.replica.port}`)
})
