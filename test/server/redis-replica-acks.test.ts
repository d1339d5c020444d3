import t from 'tap'
import { buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { FaultLoad } from '../support/faults.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
import { until } from '../support/wait.js'

t.test('REDIS_REPLICA_ACKS: a write no replica acknowledged is undone and answers 503', redisTestOptions(), async (t) => {
  const { path, keys } = writeTenants(t)
  const primary = await startRedis()
  t.teardown(async () => { await primary.stop() })
  // A replica writes the snapshot it receives into its directory: the test's own.
  const replica = await startRedis(['--replicaof', '127.0.0.1', String(primary.port), '--dir', t.testdirName])
  t.teardown(async () => { await replica.stop() })
  const admin = await connectFailFast(primary.url)
  t.teardown(() => { admin.disconnect() })
  await until('the replica in sync', async () => /slave0:.*state=online/.test(await admin.info('replication')))

  const app = await buildApp(t, { REDIS_URL: primary.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_REPLICA_ACKS: '1', REDIS_REPLICA_ACK_TIMEOUT_MS: '50' })
  await until('the app connected to Redis', () => app.app.redis?.status === 'ready')
  const load = new FaultLoad(app, keys.acmeLive)
  const answers = await Promise.all(Array.from({ length: 20 }, async () => await load.dispatch()))
  t.same([...new Set(answers)], [200], 'with the replica acknowledging, dispatches answer 200')
  const verified = await Promise.all(load.takeOutstanding(5).map(async (issued) => await load.verify(issued)))
  t.same([...new Set(verified)], [200], 'and verifies too')

  // The replica stops acknowledging: every write is undone and answers 503.
  replica.freeze()
  let thawed = false
  t.teardown(() => { if (!thawed) replica.thaw() })
  const [dispatched, checked] = await Promise.all([
    Promise.all(Array.from({ length: 10 }, async () => await load.dispatch())),
    Promise.all(load.takeOutstanding(10).map(async (issued) => await load.verify(issued)))
  ])
  t.same([...new Set([...dispatched, ...checked])], [503], 'without acknowledgement, dispatch and verify answer 503')
  replica.thaw()
  thawed = true
  await until('the replica in sync again', async () => /slave0:.*state=online/.test(await admin.info('replication')))
  // Charges and codes on the primary match the 200s; each verify answered 503 verifies on retry.
  await load.check(t, primary.url)
})
