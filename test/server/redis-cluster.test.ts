import t, { type Test } from 'tap'
import { Cluster } from 'ioredis'
import { RedisIdempotencyStore } from '../../lib/state/redis/idempotency-store.js'
import { RedisAdmission } from '../../lib/state/redis/admission.js'
import { RedisQuotaStore } from '../../lib/state/redis/quota-store.js'
import { RedisSandboxInbox } from '../../lib/state/redis/sandbox-inbox.js'
import { RedisTokenStore } from '../../lib/state/redis/token-store.js'
import { RedisVerificationLog } from '../../lib/state/redis/verification-log.js'
import { tokenKey } from '../../lib/state/redis/keys.js'
import { ConfigError, parseConfig } from '../../lib/config/from-env.js'
import { parseWindow } from '../../lib/limits/window.js'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, writeTenants, type TestApp, assertStartsUnavailable } from '../helper.js'
import { FaultLoad } from '../support/faults.js'
import { freePort } from '../support/redis.js'
import { ACME_LIVE, reserve, rightForm, tokenDispatch, tokenRef, tokenVerify, type TenantMode } from '../support/admission.js'
import { ask, startCluster, topologyTestOptions, type ClusterShard, type RedisClusterSet } from '../support/redis-topologies.js'
import { until } from '../support/wait.js'

/*
 * The Redis-backed stores and the service on a real three-primary Cluster. A Cluster refuses
 * (CROSSSLOT) any script, MULTI or pipeline whose keys live in different slots, so these runs
 * prove every multi-key operation is hash-tagged; the many scopes and keys used spread the data
 * over all three primaries, which the last store test checks.
 */

const hour = parseWindow('1h')
if (hour === null) throw new Error('test setup: 1h should parse')

// 90 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('configuration: one topology; node lists; credentials only where no URL carries them', async (t) => {
  const config = parseConfig({
    REDIS_CLUSTER_NODES: ' 10.0.0.1:7000, [::1]:7001 ,redis-2.internal:7002', REDIS_USERNAME: 'otp', REDIS_PASSWORD: 'hunter2', REDIS_TLS: 'true', OTP_HMAC_KEYS: TEST_HMAC_KEYS
  })
  t.strictSame(config.redis, {
    kind: 'cluster',
    nodes: [{ host: '10.0.0.1', port: 7000 }, { host: '::1', port: 7001 }, { host: 'redis-2.internal', port: 7002 }],
    username: 'otp',
    password: 'hunter2',
    tls: true
  })
  t.equal(config.redisUrl, null)
  t.strictSame(parseConfig({ REDIS_URL: 'rediss://u:p@r:6380', OTP_HMAC_KEYS: TEST_HMAC_KEYS }).redis, { kind: 'single', url: 'rediss://u:p@r:6380' })
  t.equal(parseConfig({}).redis, null)

  const keys = { OTP_HMAC_KEYS: TEST_HMAC_KEYS }
  const cases: Array<[Record<string, string>, string, RegExp]> = [
    [{ ...keys, REDIS_URL: 'redis://r', REDIS_CLUSTER_NODES: 'r:7000' }, 'REDIS_CLUSTER_NODES', /^Invalid configuration: REDIS_CLUSTER_NODES cannot be combined with REDIS_URL: set exactly one of REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES$/],
    [{ ...keys, REDIS_SENTINELS: 's:26379', REDIS_SENTINEL_NAME: 'm', REDIS_CLUSTER_NODES: 'r:7000' }, 'REDIS_CLUSTER_NODES', /cannot be combined with REDIS_SENTINELS/],
    [{ REDIS_CLUSTER_NODES: 'r:7000' }, 'OTP_HMAC_KEYS', /OTP_HMAC_KEYS is required when REDIS_CLUSTER_NODES is set/],
    [{ ...keys, REDIS_CLUSTER_NODES: 'r:7000,r2' }, 'REDIS_CLUSTER_NODES', /must be comma-separated host:port pairs \(got "r2"\)/],
    [{ ...keys, REDIS_CLUSTER_NODES: 'r:70000' }, 'REDIS_CLUSTER_NODES', /host:port pairs/],
    [{ ...keys, REDIS_CLUSTER_NODES: '::1:7000' }, 'REDIS_CLUSTER_NODES', /host:port pairs/],
    [{ ...keys, REDIS_CLUSTER_NODES: ' , ' }, 'REDIS_CLUSTER_NODES', /at least one host:port/],
    [{ ...keys, REDIS_CLUSTER_NODES: 'r:7000', REDIS_USERNAME: 'otp' }, 'REDIS_PASSWORD', /REDIS_PASSWORD is required when REDIS_USERNAME is set/],
    [{ ...keys, REDIS_URL: 'redis://r', REDIS_PASSWORD: 'hunter2' }, 'REDIS_PASSWORD', /only used with REDIS_SENTINELS or REDIS_CLUSTER_NODES/],
    [{ ...keys, REDIS_URL: 'redis://r', REDIS_TLS: 'true' }, 'REDIS_TLS', /only used with/],
    [{ ...keys, REDIS_CLUSTER_NODES: 'r:7000', REDIS_TLS: 'yes' }, 'REDIS_TLS', /REDIS_TLS must be one of false, true/]
  ]
  for (const [env, variable, message] of cases) {
    const error = t.throws(() => parseConfig(env)) as ConfigError
    t.ok(error instanceof ConfigError, JSON.stringify(env))
    t.equal(error.variable, variable)
    t.match(error.message, message)
    t.notMatch(error.message, /hunter2/, 'the password is never echoed')
  }
})

t.test('configuration: a setting without effect in the chosen topology is refused at start', async (t) => {
  const keys = { OTP_HMAC_KEYS: TEST_HMAC_KEYS }
  const cluster = { ...keys, REDIS_CLUSTER_NODES: 'r:7000' }
  t.same(parseConfig({ ...cluster, REDIS_REPLICA_ACKS: '1' }).redisReplicaAcks, { count: 1, timeoutMs: 100 }, 'REDIS_REPLICA_ACKS applies on a Cluster')
  t.same(parseConfig({ ...keys, REDIS_URL: 'redis://r', REDIS_REPLICA_ACKS: '2', REDIS_REPLICA_ACK_TIMEOUT_MS: '250ms', REDIS_COMMAND_TIMEOUT_MS: '1s' }).redisReplicaAcks, { count: 2, timeoutMs: 250 })
  // .env.example spells every default out: a default chooses nothing, and is accepted anywhere.
  t.ok(parseConfig({ REDIS_REPLICA_ACKS: '0', REDIS_REPLICA_ACK_TIMEOUT_MS: '100', REDIS_COMMAND_TIMEOUT_MS: '500', MEMORY_STORE_MAX_TOKENS: '1000000' }))
  t.ok(parseConfig({ ...cluster, REDIS_REPLICA_ACKS: '0', REDIS_REPLICA_ACK_TIMEOUT_MS: '100ms', MEMORY_STORE_MAX_TOKENS: '1000000' }))
  const cases: Array<[Record<string, string>, string, string]> = [
    [{ REDIS_REPLICA_ACKS: '1' }, 'REDIS_REPLICA_ACKS', 'REDIS_REPLICA_ACKS is only used with one of REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES: the embedded default has no replicas'],
    [{ REDIS_COMMAND_TIMEOUT_MS: '2s' }, 'REDIS_COMMAND_TIMEOUT_MS', 'REDIS_COMMAND_TIMEOUT_MS is only used with one of REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES'],
    [{ ...cluster, MEMORY_STORE_MAX_TOKENS: '5000' }, 'MEMORY_STORE_MAX_TOKENS', 'MEMORY_STORE_MAX_TOKENS is only used on the embedded default, not with REDIS_CLUSTER_NODES (Redis holds the codes)'],
    [{ ...cluster, REDIS_REPLICA_ACK_TIMEOUT_MS: '200' }, 'REDIS_REPLICA_ACK_TIMEOUT_MS', 'REDIS_REPLICA_ACK_TIMEOUT_MS is only used with REDIS_REPLICA_ACKS of 1 or more'],
    [{ REDIS_REPLICA_ACK_TIMEOUT_MS: '200' }, 'REDIS_REPLICA_ACK_TIMEOUT_MS', 'REDIS_REPLICA_ACK_TIMEOUT_MS is only used with REDIS_REPLICA_ACKS of 1 or more'],
    [{ ...cluster, REDIS_REPLICA_ACKS: '1', REDIS_REPLICA_ACK_TIMEOUT_MS: '500' }, 'REDIS_REPLICA_ACK_TIMEOUT_MS', 'REDIS_REPLICA_ACK_TIMEOUT_MS must be below REDIS_COMMAND_TIMEOUT_MS (500 ms), or the commands behind a WAIT time out before it returns (got 500 ms)']
  ]
  for (const [env, variable, message] of cases) {
    const error = t.throws(() => parseConfig(env)) as ConfigError
    t.ok(error instanceof ConfigError, JSON.stringify(env))
    t.equal(error.variable, variable)
    t.equal(error.message, `Invalid configuration: ${message}`)
  }
})

t.test('Redis Cluster', topologyTestOptions(), async (t) => {
  const cluster = await startCluster()
  t.teardown(cluster.stop)
  const client = new Cluster(cluster.servers.map(({ port }) => ({ host: '127.0.0.1', port })), {
    enableOfflineQueue: false,
    enableAutoPipelining: true,
    scaleReads: 'master',
    redisOptions: { maxRetriesPerRequest: 0, commandTimeout: 5000 }
  })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => { reject(new Error('the cluster client did not become ready')) }, 15_000)
    client.once('ready', () => { clearTimeout(timer); resolve() })
  })
  // Through each primary the Cluster names now: the client's own list can lag behind a primary
  // that was killed and restarted.
  const flush = async (): Promise<void> => {
    await Promise.all((await cluster.shards()).map(async ({ primary }) => await ask(primary.port, 'FLUSHALL')))
  }

  t.test('stores on the Cluster', async (t) => {
    await flush()

    t.test('tokens through admission: written once, a taken requestId collides, consumed once, deleted, ready', async (t) => {
      const admission = new RedisAdmission(client)
      const tokens = new RedisTokenStore(client)
      t.equal(await tokens.ready(), true)
      // A tenant's tokens share its slot: many tenants spread them over the primaries.
      const tenants = Array.from({ length: 30 }, (_, i): TenantMode => ({ tenantId: `holder${i}`, mode: 'live' }))
      const each = async <T>(run: (tenant: TenantMode) => Promise<T>): Promise<T[]> => await Promise.all(tenants.map(run))
      t.ok((await each(async (tenant) => await admission.dispatch(tokenDispatch(tenant, 'put')))).every((counts) => counts.kind === 'issued'), 'written')
      t.ok((await each(async (tenant) => await admission.dispatch(tokenDispatch(tenant, 'put', { record: 'k1.other|tag|other' })))).every((counts) => counts.kind === 'collision'), 'an existing token is never overwritten')
      t.ok((await each(async (tenant) => await admission.verify(tokenVerify(tenant, 'put', [rightForm('put')])))).every((counts) => counts.kind === 'verified' && counts.addressHash === 'hash-put'), 'taken, as written')
      t.ok((await each(async (tenant) => await admission.verify(tokenVerify(tenant, 'put', [rightForm('put')])))).every((counts) => counts.kind === 'missing'), 'single use')
      await admission.dispatch(tokenDispatch(ACME_LIVE, 'deleted'))
      await tokens.delete(tokenRef(ACME_LIVE, 'deleted'))
      t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'deleted', [rightForm('deleted')]))).kind, 'missing')
    })

    t.test('tokens: of 50 concurrent verifies exactly one gets the record', async (t) => {
      const admission = new RedisAdmission(client)
      for (const tenant of [ACME_LIVE, { tenantId: 'globex', mode: 'test' }, { tenantId: 'initech', mode: 'live' }] satisfies TenantMode[]) {
        await admission.dispatch(tokenDispatch(tenant, 'race'))
        const results = await Promise.all(Array.from({ length: 50 }, async () => await admission.verify(tokenVerify(tenant, 'race', [rightForm('race')]))))
        t.equal(results.filter((result) => result.kind === 'verified').length, 1, `${tenant.tenantId}:${tenant.mode}`)
        t.equal(results.filter((result) => result.kind === 'missing').length, 49)
      }
    })

    t.test('tokens: expiry is enforced', async (t) => {
      const admission = new RedisAdmission(client)
      await admission.dispatch(tokenDispatch(ACME_LIVE, 'short', { ttlMs: 150 }))
      // On the Cluster's own clock: waited for.
      await until('the token to expire', async () => await client.exists(tokenKey(ACME_LIVE.tenantId, ACME_LIVE.mode, 'short')) === 0)
      t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'short', [rightForm('short')]))).kind, 'missing')
      t.equal((await admission.dispatch(tokenDispatch(ACME_LIVE, 'short'))).kind, 'issued', 'an expired requestId can be used again')
    })

    t.test('quota: of 100 concurrent reservations with limit 10, exactly 10 succeed, in every scope', async (t) => {
      const admission = new RedisAdmission(client)
      const quota = new RedisQuotaStore(client)
      const now = Date.now()
      const tenants = Array.from({ length: 6 }, (_, i): TenantMode => ({ tenantId: `tenant${i}`, mode: 'live' }))
      const decisions = await Promise.all(tenants.map(async (tenant) =>
        await Promise.all(Array.from({ length: 100 }, async () => await reserve(admission, tenant, { limit: 10, window: hour, nowMs: now })))))
      for (const [index, tenant] of tenants.entries()) {
        const allowed = (decisions[index] ?? []).filter((decision) => decision.allowed)
        t.strictSame(allowed.map((decision) => decision.used).sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], tenant.tenantId)
        t.equal((await quota.usage(`${tenant.tenantId}:live`, hour, now)).used, 10, 'refusals did not count')
      }
      await quota.refund('tenant0:live', decisions[0]?.[0]?.windowId ?? '')
      t.equal((await quota.usage('tenant0:live', hour, now)).used, 9, 'refund runs on the Cluster too')
    })

    t.test('idempotency store: of 20 concurrent begins one starts; sending, replay, mismatch, abandon', async (t) => {
      const idem = new RedisIdempotencyStore(client)
      for (const scope of ['acme:live', 'globex:test', 'initech:live']) {
        const claims = await Promise.all(Array.from({ length: 20 }, async (_, i) => ({ attempt: `a${i}`, claim: await idem.begin(scope, 'burst', 'fp', `a${i}`, 60_000, 5_000) })))
        const started = claims.filter(({ claim }) => claim.state === 'started')
        t.equal(started.length, 1, scope)
        t.equal(claims.filter(({ claim }) => claim.state === 'in_flight').length, 19)
        const owner = started[0]?.attempt ?? ''
        t.equal(await idem.sending(scope, 'burst', owner), true, 'the owner marks that it sends')
        await idem.complete(scope, 'burst', 'fp', owner, { statusCode: 200, body: '{"ok":true}', headers: { 'quota-limit': '5' } }, 60_000)
        t.strictSame(await idem.begin(scope, 'burst', 'fp', 'retry', 60_000, 5_000),
          { state: 'replay', response: { statusCode: 200, body: '{"ok":true}', headers: { 'quota-limit': '5' } } })
        t.strictSame(await idem.begin(scope, 'burst', 'other', 'retry', 60_000, 5_000), { state: 'mismatch' })
        t.strictSame(await idem.begin(scope, 'dropped', 'fp', 'first', 60_000, 5_000), { state: 'started' })
        await idem.abandon(scope, 'dropped', 'first')
        t.strictSame(await idem.begin(scope, 'dropped', 'fp', 'second', 60_000, 5_000), { state: 'started' }, 'an abandoned claim is free again')
      }
    })

    t.test('admission scripts: a token is consumed once, wrong guesses lock its recipient, on every slot', async (t) => {
      const admission = new RedisAdmission(client)
      for (const { tenantId, mode } of [ACME_LIVE, { tenantId: 'globex', mode: 'test' }, { tenantId: 'initech', mode: 'live' }] satisfies TenantMode[]) {
        const scope = `${tenantId}:${mode}`
        const tag = `{${scope}}`
        const limits = [{ name: 'recipient' as const, tenantId, mode, bucket: 'ada', max: 100, windowMs: 60_000 }]
        const lockout = { threshold: 3, baseMs: 60_000, maxMs: 3_600_000, resetAfterMs: 86_400_000 }
        const dispatch = async (requestId: string) => await admission.dispatch({
          lane: 'backend',
          recipient: { tenantId, mode, recipientTag: 'ada' },
          suppression: 'refuse',
          laneSubject: 'ada',
          ownLimits: [],
          sharedLimits: limits,
          // The service-wide bucket is tagged by the mailbox: another slot, counted by a second command.
          mailbox: { name: 'mailbox', mode: 'live', bucket: 'ada', max: 1_000_000, windowMs: 60_000, reserve: 2 },
          quota: {
            tenant: { scope, share: null, limit: 1000, window: hour },
            share: { scope, share: 'rk1', limit: 100, window: hour },
            nowMs: Date.now(),
            description: 'allowance'
          },
          token: { requestId, record: `k1.right-${requestId}|ada`, ttlMs: 60_000 }
        })
        const verify = async (requestId: string, storedForm: string) =>
          await admission.verify({ lane: 'backend', ownLimits: limits, sharedLimits: [], token: { tenantId, mode, requestId }, storedForms: [storedForm], lockout })

        t.equal((await dispatch('a')).kind, 'issued', scope)
        t.equal((await dispatch('a')).kind, 'collision', 'a taken requestId is refused before anything counts')
        const verdicts = await Promise.all(Array.from({ length: 20 }, async () => await verify('a', 'k1.right-a')))
        t.equal(verdicts.filter((verdict) => verdict.kind === 'verified').length, 1, 'of 20 concurrent verifies one consumes the token')
        t.equal(verdicts.filter((verdict) => verdict.kind === 'missing').length, 19)
        for (const requestId of ['w1', 'w2', 'w3']) {
          t.equal((await dispatch(requestId)).kind, 'issued')
          t.equal((await verify(requestId, 'k1.wrong')).kind, 'mismatch')
        }
        const locked = await dispatch('b')
        t.equal(locked.kind, 'locked', 'three wrong guesses in a row lock the recipient')
        t.ok(locked.kind === 'locked' && locked.lockedForMs > 50_000 && locked.lockedForMs <= 60_000, 'for the first lock\'s length')
        t.equal((await client.hget(`lockout:${tag}:ada`, 'f')), '3', 'the run lives beside the tokens of its scope')
      }
    })

    t.test('admission: concurrent dispatches of tenants on different slots are grouped by their keys\' slots', async (t) => {
      const admission = new RedisAdmission(client)
      const tenants = Array.from({ length: 12 }, (_, i) => `tenant${i}`)
      const verdicts = await Promise.all(tenants.map(async (tenantId) => await admission.dispatch({
        lane: 'backend',
        recipient: { tenantId, mode: 'live', recipientTag: 'ada' },
        suppression: 'refuse',
        laneSubject: 'ada',
        ownLimits: [{ name: 'source', tenantId, mode: 'live', bucket: 'x', max: 100, windowMs: 60_000 }],
        sharedLimits: [],
        mailbox: null,
        quota: { tenant: { scope: `${tenantId}:live`, share: null, limit: 1000, window: hour }, share: null, nowMs: Date.now(), description: 'allowance' },
        token: { requestId: 'concurrent', record: 'k1.x|ada', ttlMs: 60_000 }
      })))
      t.strictSame(verdicts.map((verdict) => verdict.kind), tenants.map(() => 'issued'))
    })

    t.test('admission: over the service-wide mailbox cap, an admitted dispatch is undone (its bucket lives in another slot)', async (t) => {
      const admission = new RedisAdmission(client)
      const scope = 'capped:live'
      const tag = `{${scope}}`
      const quota = new RedisQuotaStore(client)
      const dispatch = async (requestId: string) => await admission.dispatch({
        lane: 'backend',
        recipient: { tenantId: 'capped', mode: 'live', recipientTag: 'capped' },
        suppression: 'refuse',
        laneSubject: 'capped',
        ownLimits: [],
        sharedLimits: [],
        mailbox: { name: 'mailbox', mode: 'live', bucket: 'capped', max: 1, windowMs: 60_000, reserve: 0 },
        quota: { tenant: { scope, share: null, limit: 1000, window: hour }, share: { scope, share: 'rk1', limit: 100, window: hour }, nowMs: Date.now(), description: 'allowance' },
        token: { requestId, record: 'k1.x|capped', ttlMs: 60_000 }
      })
      t.equal((await dispatch('first')).kind, 'issued')
      const capped = await dispatch('second')
      t.equal(capped.kind === 'limited' && capped.exceeded.limit.name, 'mailbox', 'the second is over the cap')
      t.equal(await client.get(`otp:${tag}:second`), null, 'its token is gone')
      t.equal((await quota.usage(scope, hour, Date.now())).used, 1, 'its unit is back')
      t.equal((await quota.usage(scope, hour, Date.now(), 'rk1')).used, 1, 'and its share\'s')
    })

    t.test('admission: over the cap, a dispatch within its tenant\'s reserve stands; past it, it is undone with its unit of the tenant\'s count', async (t) => {
      const admission = new RedisAdmission(client)
      const dispatch = async (tenantId: string, requestId: string) => await admission.dispatch({
        lane: 'backend',
        recipient: { tenantId, mode: 'live', recipientTag: 'reserved' },
        suppression: 'refuse',
        laneSubject: 'reserved',
        ownLimits: [],
        sharedLimits: [],
        mailbox: { name: 'mailbox', mode: 'live', bucket: 'reserved', max: 2, windowMs: 60_000, reserve: 1 },
        quota: { tenant: { scope: `${tenantId}:live`, share: null, limit: 1000, window: hour }, share: null, nowMs: Date.now(), description: 'allowance' },
        token: { requestId, record: 'k1.x|reserved', ttlMs: 60_000 }
      })
      for (const requestId of ['f1', 'f2']) t.equal((await dispatch('filler', requestId)).kind, 'issued', 'another tenant fills the cap')
      t.equal((await dispatch('late', 'l1')).kind, 'issued', 'the cap is full, but this tenant has its reserve')
      const past = await dispatch('late', 'l2')
      t.equal(past.kind === 'limited' && past.exceeded.limit.name, 'mailbox', 'past its reserve, the cap refuses it')
      t.equal(await client.get('otp:{late:live}:l2'), null, 'its token is gone')
      t.equal(await client.get('rl:mc:{late:live}:reserved'), '1', 'and its unit of the tenant\'s count is back: only the code that stands is counted')
      t.equal((await new RedisQuotaStore(client).usage('late:live', hour, Date.now())).used, 1, 'as is its quota unit')
    })

    t.test('sandbox inbox: newest first, capped, per tenant', async (t) => {
      const inbox = new RedisSandboxInbox(client)
      for (const tenant of ['acme', 'globex', 'initech']) {
        for (let i = 0; i < 25; i++) {
          await inbox.add(tenant, { requestId: `r${i}`, to: 'Box@Example.com', from: 'f', subject: 's', text: 't', html: 'h', code: '123456', createdAt: new Date().toISOString() })
        }
        const messages = await inbox.list(tenant, 'box@example.com')
        t.equal(messages.length, 20, tenant)
        t.equal(messages[0]?.requestId, 'r24')
      }
    })

    t.test('scripts whose number of keys varies go with their keys: a turn\'s writes of every primary\'s tenants all land', async (t) => {
      const log = new RedisVerificationLog(client, { retentionMs: 86_400_000, maxPerScope: 100 })
      const inbox = new RedisSandboxInbox(client)
      const idempotency = new RedisIdempotencyStore(client)
      // Twelve tenants' slots spread over the three primaries; everything below leaves in one turn.
      const tenants = Array.from({ length: 12 }, (_, i) => `spread${i}`)
      const at = new Date().toISOString()
      for (const tenantId of tenants) log.start({ tenantId, mode: 'live', requestId: 'r1' }, 'backend', { type: 'requested', at, keyId: 'sk1', expiresAt: at })
      const outcomes = await Promise.allSettled([
        log.flush(),
        ...tenants.map(async (tenantId) => { await inbox.add(tenantId, { requestId: 'r1', to: 'box@example.com', from: 'f', subject: 's', text: 't', html: 'h', code: '123456', createdAt: at }) }),
        ...tenants.map(async (tenantId) => await idempotency.begin(`${tenantId}:live`, 'k', 'fingerprint', 'attempt', 60_000, 5_000))
      ])
      const failures = outcomes.flatMap((outcome) => outcome.status === 'rejected' ? [String((outcome.reason as Error).cause ?? outcome.reason)] : [])
      t.strictSame(failures, [], 'no write failed')
      t.equal(log.dropped(), 0, 'no story was dropped')
      const stories = await Promise.all(tenants.map(async (tenantId) => await log.read({ tenantId, mode: 'live', requestId: 'r1' })))
      t.ok(stories.every((story) => story?.counts.requested === 1), 'every tenant\'s story is there')
      const boxes = await Promise.all(tenants.map(async (tenantId) => await inbox.list(tenantId, 'box@example.com')))
      t.ok(boxes.every((box) => box.length === 1), 'every tenant\'s sandbox message is there')
    })

    t.test('the data is spread over all three primaries', async (t) => {
      const sizes = await Promise.all(client.nodes('master').map(async (node) => await node.dbsize()))
      t.equal(sizes.length, 3)
      t.ok(sizes.every((size) => size > 0), `keys per primary: ${sizes.join(', ')}`)
    })
  })

  t.test('the service on the Cluster', async (t) => {
    t.beforeEach(async () => { await flush() })
    const env = { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS }
    const dispatch = async (built: TestApp, key: string, email: string, headers: Record<string, string> = {}) =>
      await built.app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(key), ...headers }, payload: { email } })
    const verify = async (built: TestApp, key: string, requestId: string, userGuess: string) =>
      await built.app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(key), payload: { requestId, userGuess } })

    t.test('dispatch, the code from the sandbox inbox, verify once; ready', async (t) => {
      const { path, keys } = writeTenants(t)
      const built = await buildApp(t, { ...env, TENANTS_FILE: path })
      t.ok(built.app.redis instanceof Cluster, 'a Cluster client')
      t.equal(built.app.redis?.status, 'ready', 'ready once boot is done')
      t.equal((await built.app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200)
      for (let i = 0; i < 5; i++) {
        const email = `inbox${i}@example.com`
        const sent = await dispatch(built, keys.acmeTest, email)
        t.equal(sent.statusCode, 200)
        const inbox = await built.app.inject({ method: 'GET', url: `/sandbox/messages?email=${email}`, headers: bearer(keys.acmeTest) })
        t.equal(inbox.statusCode, 200)
        const [message] = inbox.json().data.messages
        t.equal(message.requestId, sent.json().data.requestId)
        t.equal((await verify(built, keys.acmeTest, message.requestId, message.code)).statusCode, 200)
        t.equal((await verify(built, keys.acmeTest, message.requestId, message.code)).statusCode, 400, 'a code works once')
      }
      const live = await dispatch(built, keys.acmeLive, 'live@example.com')
      t.equal((await verify(built, keys.acmeLive, live.json().data.requestId, built.mail.codeFor('live@example.com'))).statusCode, 200)
    })

    t.test('two instances share the velocity limits and the lockout', async (t) => {
      const { path, keys } = writeTenants(t)
      const shared = { ...env, TENANTS_FILE: path, RATE_LIMIT_RECIPIENT: '2/15m', LOCKOUT_THRESHOLD: '1' }
      const a = await buildApp(t, shared)
      const b = await buildApp(t, shared)
      t.equal((await dispatch(a, keys.acmeLive, 'shared@example.com')).statusCode, 200)
      t.equal((await dispatch(b, keys.acmeLive, 'shared@example.com')).statusCode, 200)
      const third = await dispatch(a, keys.acmeLive, 'shared@example.com')
      t.same([third.statusCode, third.json().code], [429, 'RATE_LIMITED'], 'the recipient bucket is shared')

      const requestId = (await dispatch(a, keys.acmeLive, 'guess@example.com')).json().data.requestId
      t.equal((await verify(b, keys.acmeLive, requestId, '000000')).statusCode, 400)
      const locked = await dispatch(a, keys.acmeLive, 'guess@example.com')
      t.same([locked.statusCode, locked.json().code], [429, 'RATE_LIMITED'], 'a wrong guess on B locks dispatch on A')
      t.match(locked.json().message, /wrong codes/)
    })

    t.test('quota: allowance 5, 20 parallel dispatches over two instances, exactly 5 succeed', async (t) => {
      const { path, keys } = writeTenants(t, (file) => { file.tiers.standard = { allowance: 5, window: '1d', sandboxAllowance: 1 } })
      const a = await buildApp(t, { ...env, TENANTS_FILE: path })
      const b = await buildApp(t, { ...env, TENANTS_FILE: path })
      const answers = await Promise.all(Array.from({ length: 20 }, async (_, i) => await dispatch(i % 2 === 0 ? a : b, keys.acmeLive, `q${i}@example.com`)))
      t.equal(answers.filter((answer) => answer.statusCode === 200).length, 5)
      t.equal(answers.filter((answer) => answer.statusCode === 402).length, 15)
      t.equal(a.mail.count + b.mail.count, 5, 'five mails left, no more')

      const first = await dispatch(a, keys.acmeTest, 'idem@example.com', { 'idempotency-key': 'shared' })
      t.equal(first.statusCode, 200, `the first answer: ${first.body}`)
      const replayed = await dispatch(b, keys.acmeTest, 'idem@example.com', { 'idempotency-key': 'shared' })
      t.equal(replayed.headers['idempotent-replayed'], 'true', 'idempotency is shared too')
      t.equal(replayed.json().data.requestId, first.json().data.requestId)
    })
  })

  t.test('a primary crashes and restarts: 200 or 503 meanwhile, never 500; recovery by itself', async (t) => {
    await flush()
    const { path, keys } = writeTenants(t)
    const built = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path })
    const round = async (label: string): Promise<number[]> => await Promise.all(Array.from({ length: 12 }, async (_, i) =>
      (await built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: `${label}${i}@example.com` } })).statusCode))
    t.strictSame(new Set(await round('before')), new Set([200]))
    const [victim] = cluster.servers
    if (victim === undefined) throw new Error('test setup: no node')
    await victim.stop()
    const asked = Date.now()
    const down = await round('down')
    t.ok(down.every((status) => status === 200 || status === 503), `while down: ${down.join(' ')}`)
    // What this catches is a wait until the primary returns (only after this round): 30 s is far above any machine's speed.
    t.ok(Date.now() - asked < 30_000, `answered in ${Date.now() - asked} ms`)
    t.ok(down.includes(503), 'the slots of the dead primary answer 503')
    await victim.start()
    let after: number[] = []
    for (let i = 0; i < 100 && !(after.length > 0 && after.every((status) => status === 200)); i++) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      after = await round(`after${i}-`)
      t.ok(after.every((status) => status === 200 || status === 503), `recovering: ${after.join(' ')}`)
    }
    t.strictSame(new Set(after), new Set([200]), 'every dispatch answers 200 again')
  })

  t.test('a primary frozen: the tenants of the others are served, and /readyz stays 200', async (t) => {
    await flush()
    const { path, keys } = writeTenants(t)
    const env = { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path }
    const acme = await cluster.shardOf('otp:{acme:live}:x')
    const other = (await cluster.shards()).find((shard) => shard.primary !== acme.primary)
    if (other === undefined) throw new Error('test setup: one primary')
    // A Cluster in use: an instance ran before, so the tag key's fingerprint is recorded (on an
    // empty Cluster whose legacy fingerprint key is on the frozen primary, an instance waits for
    // it: redis-cluster-readiness.test.ts).
    await (await buildApp(t, env)).app.close()
    other.primary.freeze()
    let frozen = true
    t.teardown(() => { if (frozen) other.primary.thaw() })
    // A fresh instance reads every primary for its readiness, as a probe after a deploy would.
    const built = await buildApp(t, env)
    await until('the app connected to the Cluster', () => built.app.redis?.status === 'ready')
    const ready = await readiness(built.app)
    t.equal(ready.status, 200, 'ready: every instance depends on the same primaries, so none is taken out of service')
    t.equal(ready.body.checks.tokenStore.ok, true)
    const sent = await built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'frozen@example.com' } })
    t.equal(sent.statusCode, 200, 'a tenant of another primary is served')
    other.primary.thaw()
    frozen = false
  })

  t.test('start-up with no node reachable: bounded, not ready, 503', async (t) => {
    await assertStartsUnavailable(t, { REDIS_CLUSTER_NODES: `127.0.0.1:${await freePort()},127.0.0.1:${await freePort()}` })
  })
})

/** WAIT calls each primary has run so far (INFO commandstats), by port. */
async function waitCalls (shards: readonly ClusterShard[]): Promise<Map<number, number>> {
  return new Map(await Promise.all(shards.map(async ({ primary }) => {
    const stats = String(await ask(primary.port, 'INFO', 'commandstats'))
    return [primary.port, Number(/^cmdstat_wait:calls=(\d+)/m.exec(stats)?.[1] ?? 0)] as const
  })))
}

/** The primaries whose count grew between two readings of waitCalls, by port. */
function grown (before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>): number[] {
  return [...after].filter(([port, calls]) => calls > (before.get(port) ?? 0)).map(([port]) => port).sort()
}

/** The keys matching `pattern` on each primary, as `port key`. */
async function keysOn (shards: readonly ClusterShard[], pattern: string): Promise<Set<string>> {
  const found = await Promise.all(shards.map(async ({ primary }) => ((await ask(primary.port, 'KEYS', pattern)) as string[]).map((key) => `${primary.port} ${key}`)))
  return new Set(found.flat())
}

interface ShardTenant { id: string, key: string, shard: ClusterShard }

/** Two tenants with a live secret key each, whose codes live on two different primaries. */
async function tenantsOnTwoShards (t: Test, cluster: RedisClusterSet): Promise<{ path: string, a: ShardTenant, b: ShardTenant }> {
  const candidates = await Promise.all(Array.from({ length: 12 }, async (_, i): Promise<ShardTenant> => {
    const id = `shard${i}`
    return { id, key: generateKey('secret', 'live'), shard: await cluster.shardOf(`otp:{${id}:live}:x`) }
  }))
  const [a] = candidates
  const b = candidates.find((candidate) => candidate.shard.primary !== a?.shard.primary)
  if (a === undefined || b === undefined) throw new Error('test setup: twelve tenants on one primary')
  const { path } = writeTenants(t, (file) => {
    for (const tenant of [a, b]) file.tenants.push({ id: tenant.id, tier: 'standard', keys: [{ id: `${tenant.id}_live`, kind: 'secret', mode: 'live', sha256: hashKey(tenant.key) }] })
  })
  return { path, a, b }
}

t.test('REDIS_REPLICA_ACKS on a Cluster: each WAIT goes to the primary that took the write; too few acknowledgements undo and answer 503', topologyTestOptions(), async (t) => {
  const cluster = await startCluster({ replicas: 1 })
  t.teardown(cluster.stop)
  const shards = await cluster.shards()
  const { path, a, b } = await tenantsOnTwoShards(t, cluster)
  // Generous timeouts: a replica that answers must be in time on a busy machine too.
  const built = await buildApp(t, { REDIS_CLUSTER_NODES: cluster.nodes, OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_REPLICA_ACKS: '1', REDIS_REPLICA_ACK_TIMEOUT_MS: '500', REDIS_COMMAND_TIMEOUT_MS: '2s', RATE_LIMIT_MAILBOX: '1000/15m' })
  await until('the app connected to the Cluster', () => built.app.redis?.status === 'ready')
  const inspect = new Cluster(cluster.servers.map(({ port }) => ({ host: '127.0.0.1', port })), { scaleReads: 'master', redisOptions: { maxRetriesPerRequest: 0 } })
  inspect.on('error', () => {})
  t.teardown(() => { inspect.disconnect() })
  await until('the inspecting client connected', () => inspect.status === 'ready')
  const dispatch = async (tenant: ShardTenant, email: string): Promise<number> =>
    (await built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(tenant.key), payload: { email } })).statusCode

  // One dispatch at a time: the WAITs that follow it went to the primary of the tenant's code
  // and to the primary of the mailbox's service-wide count (another one for some mailboxes).
  const mailboxes = new Map<number, string[]>()
  for (let i = 0; i < 12; i++) {
    const email = `probe${i}@example.com`
    const [waitsBefore, countsBefore] = [await waitCalls(shards), await keysOn(shards, 'rl:m:*')]
    t.equal(await dispatch(b, email), 200)
    const waited = grown(waitsBefore, await waitCalls(shards))
    const counted = [...await keysOn(shards, 'rl:m:*')].filter((entry) => !countsBefore.has(entry))
    t.equal(counted.length, 1, 'one new mailbox count')
    const mailbox = Number(counted[0]?.split(' ')[0])
    mailboxes.set(mailbox, [...mailboxes.get(mailbox) ?? [], email])
    t.same(waited, [...new Set([b.shard.primary.port, mailbox])].sort(), `${email}: a WAIT on the tenant's primary and on the mailbox's, none elsewhere`)
  }
  const onA = mailboxes.get(a.shard.primary.port) ?? []
  const onB = mailboxes.get(b.shard.primary.port) ?? []
  t.ok(onA.length > 0 && onB.length > 0, 'some mailboxes counted on either tenant\'s primary')
  const verifyBefore = await waitCalls(shards)
  const load = new FaultLoad(built, a.key, 'live', a.id)
  t.equal(await load.dispatch(), 200)
  const [issued] = load.takeOutstanding(1)
  if (issued === undefined) throw new Error('test setup: no code')
  const afterDispatch = await waitCalls(shards)
  t.equal(await load.verify(issued), 200)
  t.same(grown(afterDispatch, await waitCalls(shards)), [a.shard.primary.port], 'a verify waits on its tenant\'s primary only')
  t.ok(grown(verifyBefore, afterDispatch).includes(a.shard.primary.port))

  // Tenant a's primary loses its replica: a's requests are undone and answer 503, as are other
  // tenants' dispatches to a mailbox counted there; b's own are served.
  for (let i = 0; i < 6; i++) t.equal(await load.dispatch(), 200)
  const [replica] = a.shard.replicas
  if (replica === undefined) throw new Error('test setup: no replica')
  replica.freeze()
  let frozen = true
  t.teardown(() => { if (frozen) replica.thaw() })
  const [dispatched, verified] = await Promise.all([
    Promise.all(Array.from({ length: 5 }, async () => await load.dispatch())),
    Promise.all(load.takeOutstanding(5).map(async (code) => await load.verify(code)))
  ])
  t.same([...new Set([...dispatched, ...verified])], [503], 'with no replica acknowledging, a\'s dispatches and verifies answer 503')
  t.same(await Promise.all(onB.map(async (email) => await dispatch(b, email))), onB.map(() => 200), 'b\'s dispatches to mailboxes counted on b\'s primary answer 200')
  t.same(await Promise.all(onA.map(async (email) => await dispatch(b, email))), onA.map(() => 503), 'b\'s dispatches to mailboxes counted on a\'s primary answer 503')
  const usage = await built.app.inject({ method: 'GET', url: '/usage', headers: bearer(b.key) })
  t.equal(usage.json().data.live.used, 12 + onB.length, 'b is charged for the dispatches answered 200 only')
  replica.thaw()
  frozen = false
  await until('the replica in sync again', async () => /master_link_status:up/.test(String(await ask(replica.port, 'INFO', 'replication'))))
  // On a's primary: charges and codes match the 200s; each verify answered 503 verifies on retry.
  await load.check(t, inspect)

  // A redemption and a suppression wait for the replica too; a redemption no replica holds is
  // taken back, so that the retry redeems.
  const sent = await built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(a.key), payload: { email: 'receipt@example.com' } })
  t.equal(sent.statusCode, 200)
  const { requestId } = sent.json().data
  const checked = await built.app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(a.key), payload: { requestId, userGuess: built.mail.codeFor('receipt@example.com') } })
  t.equal(checked.statusCode, 200)
  const redeem = async (): Promise<number> => (await built.app.inject({ method: 'POST', url: '/otp/receipts/redeem', headers: bearer(a.key), payload: { receipt: checked.json().data.receipt, email: 'receipt@example.com' } })).statusCode
  const suppress = async (): Promise<number> => (await built.app.inject({ method: 'POST', url: '/recipients/suppress', headers: bearer(a.key), payload: { email: 'receipt@example.com' } })).statusCode
  replica.freeze()
  frozen = true
  t.same([await redeem(), await suppress()], [503, 503], 'without acknowledgement, a redemption and a suppression answer 503')
  replica.thaw()
  frozen = false
  await until('the replica in sync again', async () => /master_link_status:up/.test(String(await ask(replica.port, 'INFO', 'replication'))))
  t.same([await redeem(), await redeem(), await suppress()], [200, 409, 200], 'once acknowledged, the receipt redeems, once')
})
