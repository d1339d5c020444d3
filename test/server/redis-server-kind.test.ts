import t from 'tap'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, TEST_METRICS_TOKEN, writeTenants } from '../helper.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
import { startCluster, topologyTestOptions } from '../support/redis-topologies.js'
import { refusedStart } from '../support/service-process.js'
import { until } from '../support/wait.js'

/*
 * A Redis setting that names the wrong kind of server (a replica, a Cluster node behind
 * REDIS_URL, a plain server behind REDIS_SENTINELS or REDIS_CLUSTER_NODES) used to start and
 * report ready while every dispatch answered 503. Start-up refuses it with one line naming the
 * setting; a server demoted later makes the instance not ready, with the reason. Fewer
 * replicas than REDIS_REPLICA_ACKS, and a Cluster's full-coverage setting, are told at start,
 * in readiness details and (for the writes they undo) in a metric.
 */

const refusalLine = (stderr: string): string[] => stderr.split('\n').filter((line) => line.startsWith('email-otp: '))

// 135 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('REDIS_URL naming a read-only replica: refused at start with one line', redisTestOptions(), async (t) => {
  const primary = await startRedis()
  t.teardown(primary.stop)
  const replica = await startRedis(['--replicaof', '127.0.0.1', String(primary.port)])
  t.teardown(replica.stop)
  const { exitCode, stderr } = await refusedStart({ REDIS_URL: replica.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, PORT: '0' })
  t.equal(exitCode, 1)
  t.match(refusalLine(stderr), [/^email-otp: Invalid configuration: REDIS_URL names a read-only replica \(role:slave\)/])
})

t.test('a primary demoted while serving: not ready with the reason, ready again once promoted', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(redis.stop)
  const other = await startRedis()
  t.teardown(other.stop)
  const { app } = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  t.equal((await readiness(app)).status, 200)
  const admin = await connectFailFast(redis.url)
  t.teardown(() => { admin.disconnect() })
  await admin.replicaof('127.0.0.1', other.port)
  // A reading stands a few seconds: poll until it is renewed.
  await until('not ready once demoted', async () => (await readiness(app)).status === 503)
  t.match((await readiness(app)).body.checks.tokenStore, { ok: false, reason: /REDIS_URL names a read-only replica \(role:slave\)/ })
  await admin.replicaof('NO', 'ONE')
  await until('ready once promoted again', async () => (await readiness(app)).status === 200)
})

t.test('REDIS_REPLICA_ACKS above the replicas there are: a warning at start, the count in readiness, the undone writes counted', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(redis.stop)
  const { path, keys } = writeTenants(t)
  const { app, logs } = await buildApp(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_REPLICA_ACKS: '1', REDIS_REPLICA_ACK_TIMEOUT_MS: '2000' })
  t.match(logs.lines.filter((line) => line.includes('"level":40') && line.includes('REDIS_REPLICA_ACKS')), [/REDIS_REPLICA_ACKS is 1 but the Redis primary has 0 connected replicas/], 'one warning line at start')
  const ready = await readiness(app)
  t.equal(ready.status, 200, 'still ready: the shortfall is an operator\'s to fix, and may be a replica restarting')
  t.match(ready.body.checks.tokenStore, { ok: true, replicas: { required: 1, connected: 0 }, warnings: [/REDIS_REPLICA_ACKS is 1/] })
  const dispatch = async (): Promise<number> => (await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: `user${Math.random()}@example.com` } })).statusCode
  t.equal(await dispatch(), 503)
  const metrics = await app.inject({ method: 'GET', url: '/metrics', headers: bearer(TEST_METRICS_TOKEN) })
  t.match(metrics.body, /^email_otp_redis_writes_unacknowledged_total 1$/m)

  const replica = await startRedis(['--replicaof', '127.0.0.1', String(redis.port)])
  t.teardown(replica.stop)
  await until('the replica counted', async () => (await readiness(app)).body.checks.tokenStore.replicas?.connected === 1)
  t.notOk((await readiness(app)).body.checks.tokenStore.warnings, 'no warning once the replicas suffice')
  // Counted while its first sync runs; it acknowledges once in sync.
  const replicaClient = await connectFailFast(replica.url)
  t.teardown(() => { replicaClient.disconnect() })
  await until('the replica in sync', async () => (await replicaClient.info('replication')).includes('master_link_status:up'))
  // 2 s for the in-sync replica's acknowledgement: 100 ms was passed on a loaded machine; the
  // dispatch without a replica above waits it out once.
  t.equal(await dispatch(), 200)
})

t.test('REDIS_SENTINELS naming a plain server: refused, saying it is not a Sentinel', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(redis.stop)
  const { exitCode, stderr } = await refusedStart({ REDIS_SENTINELS: `127.0.0.1:${redis.port}`, REDIS_SENTINEL_NAME: 'mymaster', OTP_HMAC_KEYS: TEST_HMAC_KEYS, PORT: '0' })
  t.equal(exitCode, 1)
  t.match(refusalLine(stderr), [new RegExp(`^email-otp: Invalid configuration: REDIS_SENTINELS names 127.0.0.1:${redis.port}, which is not a Sentinel \\(redis_mode:standalone\\)`)])
})

t.test('REDIS_CLUSTER_NODES naming a plain server: refused at start, saying it is not a Cluster node', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(redis.stop)
  const { exitCode, stderr } = await refusedStart({ REDIS_CLUSTER_NODES: `127.0.0.1:${redis.port}`, OTP_HMAC_KEYS: TEST_HMAC_KEYS, PORT: '0' })
  t.equal(exitCode, 1)
  t.match(refusalLine(stderr), [new RegExp(`^email-otp: Invalid configuration: REDIS_CLUSTER_NODES names 127.0.0.1:${redis.port}, which is not a Cluster node \\(redis_mode:standalone\\): use REDIS_URL`)])
})

t.test('Cluster', topologyTestOptions(), async (t) => {
  const cluster = await startCluster({ replicas: 1 })
  t.teardown(cluster.stop)
  const [node] = cluster.servers

  t.test('REDIS_URL naming a Cluster node: refused at start with one line', async (t) => {
    const { exitCode, stderr } = await refusedStart({ REDIS_URL: `redis://127.0.0.1:${node?.port ?? 0}`, OTP_HMAC_KEYS: TEST_HMAC_KEYS, PORT: '0' })
    t.equal(exitCode, 1)
    t.match(refusalLine(stderr), [/^email-otp: Invalid configuration: REDIS_URL names a Redis Cluster node \(cluster_enabled:1\).*REDIS_CLUSTER_NODES/])
  })

  t.test('REDIS_REPLICA_ACKS=2 with one replica per primary, and full coverage required: warned at start and in readiness', async (t) => {
    const { app, logs } = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, REDIS_REPLICA_ACKS: '2', REDIS_REPLICA_ACK_TIMEOUT_MS: '100' })
    const warnings = logs.lines.filter((line) => line.includes('"level":40'))
    t.ok(warnings.some((line) => /REDIS_REPLICA_ACKS is 2 but the Redis primary at 127\.0\.0\.1:\d+ has 1 connected replica:/.test(line)), 'the shortfall, naming a primary')
    t.ok(warnings.some((line) => line.includes('cluster-require-full-coverage yes')), 'full coverage')
    const { status, body } = await readiness(app)
    t.equal(status, 200)
    t.match(body.checks.tokenStore, { ok: true, replicas: { required: 2, connected: 1 }, warnings: [/REDIS_REPLICA_ACKS is 2/, /cluster-require-full-coverage yes: .*set it to no/] })
  })
})
