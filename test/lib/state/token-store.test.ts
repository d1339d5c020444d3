import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import type { AdmissionStore } from '../../../lib/state/admission.js'
import { MemoryAdmission } from '../../../lib/state/memory/admission.js'
import { MemoryQuotaStore } from '../../../lib/state/memory/quota-store.js'
import { MemoryTokenStore } from '../../../lib/state/memory/token-store.js'
import { RedisAdmission } from '../../../lib/state/redis/admission.js'
import { RedisTokenStore } from '../../../lib/state/redis/token-store.js'
import type { TokenStore } from '../../../lib/state/tokens.js'
import { StoreFullError, StoreUnavailableError } from '../../../lib/store-errors.js'
import { ACME_LIVE, record, rightForm, tokenDispatch, tokenRef, tokenVerify, type TenantMode } from '../../support/admission.js'
import { tokenKey } from '../../../lib/state/redis/keys.js'
import { redisTestOptions, startRedis } from '../../support/redis.js'
import { until } from '../../support/wait.js'

/*
 * Tokens are written by an admitted dispatch and consumed by a verify, through the admission
 * port, as the service does; the token port removes one whose mail did not leave.
 */

interface Adapter {
  admission: AdmissionStore
  tokens: TokenStore
  /** Lets acme's token `requestId` of `ttlMs` expire: the in-process store's clock is moved; Redis's own is waited for. */
  outlive: (requestId: string, ttlMs: number) => Promise<void>
}

/** The contract both adapters keep. */
function tokenStoreSuite (t: Test, make: (t: Test) => Promise<Adapter>): void {
  t.test('a dispatch stores its record; a taken requestId collides; a verify consumes it once', async (t) => {
    const { admission } = await make(t)
    t.equal((await admission.dispatch(tokenDispatch(ACME_LIVE, 'a'))).kind, 'issued')
    t.equal((await admission.dispatch(tokenDispatch(ACME_LIVE, 'a', { record: 'k1.other|tag|other' }))).kind, 'collision', 'an existing token is never overwritten')
    t.match(await admission.verify(tokenVerify(ACME_LIVE, 'a', [rightForm('a')])), { kind: 'verified', addressHash: 'hash-a' }, 'the first record, whole')
    t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'a', [rightForm('a')]))).kind, 'missing', 'single use')
    t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'never', ['k1.x']))).kind, 'missing')
  })

  t.test('a wrong guess consumes the token too', async (t) => {
    const { admission } = await make(t)
    await admission.dispatch(tokenDispatch(ACME_LIVE, 'w'))
    t.match(await admission.verify(tokenVerify(ACME_LIVE, 'w', ['k1.wrong'])), { kind: 'mismatch', addressHash: 'hash-w' })
    t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'w', [rightForm('w')]))).kind, 'missing')
  })

  t.test('delete removes a token', async (t) => {
    const { admission, tokens } = await make(t)
    await admission.dispatch(tokenDispatch(ACME_LIVE, 'b'))
    await tokens.delete(tokenRef(ACME_LIVE, 'b'))
    t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'b', [rightForm('b')]))).kind, 'missing')
    await tokens.delete(tokenRef(ACME_LIVE, 'b'))
  })

  t.test('expiry is enforced', async (t) => {
    const { admission, outlive } = await make(t)
    await admission.dispatch(tokenDispatch(ACME_LIVE, 'c', { ttlMs: 150 }))
    await outlive('c', 150)
    t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'c', [rightForm('c')]))).kind, 'missing')
    t.equal((await admission.dispatch(tokenDispatch(ACME_LIVE, 'c'))).kind, 'issued', 'an expired requestId can be used again')
  })

  t.test('of 50 concurrent verifies exactly one gets the record', async (t) => {
    const { admission } = await make(t)
    await admission.dispatch(tokenDispatch(ACME_LIVE, 'd'))
    const results = await Promise.all(Array.from({ length: 50 }, async () => await admission.verify(tokenVerify(ACME_LIVE, 'd', [rightForm('d')]))))
    t.equal(results.filter((result) => result.kind === 'verified').length, 1)
    t.equal(results.filter((result) => result.kind === 'missing').length, 49)
  })

  t.test('tenants and modes are apart: a requestId names a token in its own tenant and mode only', async (t) => {
    const { admission } = await make(t)
    const sandbox: TenantMode = { tenantId: 'acme', mode: 'test' }
    const globex: TenantMode = { tenantId: 'globex', mode: 'live' }
    for (const tenant of [ACME_LIVE, sandbox, globex]) t.equal((await admission.dispatch(tokenDispatch(tenant, 'same', { record: `k1.${tenant.tenantId}-${tenant.mode}|tag|h` }))).kind, 'issued')
    t.equal((await admission.verify(tokenVerify(globex, 'same', ['k1.acme-live']))).kind, 'mismatch', 'another tenant\'s form does not verify')
    t.equal((await admission.verify(tokenVerify(sandbox, 'same', ['k1.acme-test']))).kind, 'verified')
    t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'same', ['k1.acme-live']))).kind, 'verified')
  })

  t.test('ready', async (t) => {
    const { tokens } = await make(t)
    t.equal(await tokens.ready(), true)
  })
}

function memoryAdapter (t: Test, maxTokensPerScope = 1000): Adapter & { store: MemoryTokenStore } {
  let now = Date.now()
  const store = new MemoryTokenStore({ maxTokensPerScope, now: () => now })
  t.teardown(async () => { await store.close() })
  const outlive = async (_requestId: string, ttlMs: number): Promise<void> => { now += ttlMs }
  return { admission: new MemoryAdmission(store, new MemoryQuotaStore()), tokens: store, store, outlive }
}

t.test('in process', async (t) => {
  tokenStoreSuite(t, async (t) => memoryAdapter(t))

  t.test('records are kept as given', async (t) => {
    const { admission, store } = memoryAdapter(t)
    const opaque = 'k1.abc|def|with|pipes'
    t.equal((await admission.dispatch(tokenDispatch(ACME_LIVE, 'e', { record: opaque }))).kind, 'issued')
    t.equal(store.peek(tokenRef(ACME_LIVE, 'e')), opaque)
  })

  t.test('a cap bounds memory; expired tokens are swept before refusing', async (t) => {
    let now = 1_000_000
    const store = new MemoryTokenStore({ maxTokensPerScope: 3, now: () => now })
    t.teardown(async () => { await store.close() })
    await store.put(tokenRef(ACME_LIVE, 'x1'), 'r', 1000)
    await store.put(tokenRef(ACME_LIVE, 'x2'), 'r', 1000)
    await store.put(tokenRef(ACME_LIVE, 'x3'), 'r', 5000)
    await t.rejects(store.put(tokenRef(ACME_LIVE, 'x4'), 'r', 1000), StoreFullError)
    t.equal(await store.ready(), true, 'a full scope takes nobody out of rotation')
    now += 2000
    t.equal(await store.put(tokenRef(ACME_LIVE, 'x4'), 'r', 1000), true, 'two expired tokens made room')
    t.equal(store.size, 2)
  })

  t.test('each tenant scope has its own cap: one at its cap leaves every other storing codes', async (t) => {
    const { admission, store } = memoryAdapter(t, 2)
    const dispatch = async (tenant: TenantMode, requestId: string) => await admission.dispatch(tokenDispatch(tenant, requestId))
    t.equal((await dispatch(ACME_LIVE, 'a1')).kind, 'issued')
    t.equal((await dispatch(ACME_LIVE, 'a2')).kind, 'issued')
    await t.rejects(dispatch(ACME_LIVE, 'a3'), StoreFullError, 'acme is at its cap')
    t.equal((await dispatch({ tenantId: 'acme', mode: 'test' }, 't1')).kind, 'issued', 'its sandbox is another scope')
    t.equal((await dispatch({ tenantId: 'globex', mode: 'live' }, 'g1')).kind, 'issued', 'another tenant stores its codes')
    t.equal(store.peek(tokenRef(ACME_LIVE, 'a1')), record('a1'), 'acme\'s own codes are intact')
    t.equal((await admission.verify(tokenVerify(ACME_LIVE, 'a1', [rightForm('a1')]))).kind, 'verified')
    t.equal((await dispatch(ACME_LIVE, 'a3')).kind, 'issued', 'a used code made room')
  })

  t.test('the sweep removes expired tokens from the oldest on', async (t) => {
    let now = 0
    const store = new MemoryTokenStore({ maxTokensPerScope: 100, now: () => now })
    t.teardown(async () => { await store.close() })
    for (let i = 0; i < 10; i++) await store.put(tokenRef(ACME_LIVE, `s${i}`), 'r', 100)
    await store.put(tokenRef(ACME_LIVE, 'long'), 'r', 10_000)
    now = 500
    t.equal(store.sweep(1024), 10)
    t.equal(store.size, 1)
  })
})

/** A command queued while Redis is down would wait this long: far from what failing at once takes. */
const OUTAGE_COMMAND_TIMEOUT_MS = 20_000

t.test('on Redis', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  const connect = async (t: Test, commandTimeout = 5000): Promise<Redis> => {
    // A command timeout for a busy machine: the test of an outage below closes the connection.
    const client = new Redis(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout })
    client.on('error', () => {})
    await new Promise((resolve) => client.once('ready', resolve))
    t.teardown(() => { client.disconnect() })
    return client
  }
  tokenStoreSuite(t, async (t) => {
    const client = await connect(t)
    await client.flushall()
    const outlive = async (requestId: string): Promise<void> => {
      await until('the token to expire in Redis', async () => await client.exists(tokenKey(ACME_LIVE.tenantId, ACME_LIVE.mode, requestId)) === 0)
    }
    return { admission: new RedisAdmission(client), tokens: new RedisTokenStore(client), outlive }
  })

  t.test('two instances: of 50 concurrent verifies through either, exactly one gets the record', async (t) => {
    const first = new RedisAdmission(await connect(t))
    const second = new RedisAdmission(await connect(t))
    await first.dispatch(tokenDispatch(ACME_LIVE, 'shared'))
    t.equal((await second.dispatch(tokenDispatch(ACME_LIVE, 'shared'))).kind, 'collision', 'the other instance sees the token')
    const results = await Promise.all(Array.from({ length: 50 }, async (_, i) => await (i % 2 === 0 ? first : second).verify(tokenVerify(ACME_LIVE, 'shared', [rightForm('shared')]))))
    t.equal(results.filter((result) => result.kind === 'verified').length, 1)
    t.equal(results.filter((result) => result.kind === 'missing').length, 49)
  })

  t.test('an unreachable Redis fails fast with StoreUnavailableError', async (t) => {
    const client = await connect(t, OUTAGE_COMMAND_TIMEOUT_MS)
    const admission = new RedisAdmission(client)
    const tokens = new RedisTokenStore(client)
    await server.stop()
    t.teardown(async () => { await server.start() })
    const started = Date.now()
    await t.rejects(admission.dispatch(tokenDispatch(ACME_LIVE, 'z')), StoreUnavailableError)
    await t.rejects(admission.verify(tokenVerify(ACME_LIVE, 'z', [rightForm('z')])), StoreUnavailableError)
    await t.rejects(tokens.delete(tokenRef(ACME_LIVE, 'z')), StoreUnavailableError)
    t.equal(await tokens.ready(), false)
    // Failing at once, not after the command timeout: half of it, so no machine's speed decides.
    t.ok(Date.now() - started < OUTAGE_COMMAND_TIMEOUT_MS / 2, `no hang: failed in ${Date.now() - started} ms`)
  })
})
