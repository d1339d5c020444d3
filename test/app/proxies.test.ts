/*
 * Behind a trusted proxy (TRUST_PROXY=127.0.0.1), over real sockets from several loopback
 * sources: X-Forwarded-For entries that name an address (with a port, in brackets) are that
 * address for block lists and per-source buckets; an entry that names none, in the position
 * that would name the client, is refused with 400 INVALID_FORWARDED_FOR. Forwarded (RFC 7239)
 * and X-Real-IP are never read.
 */
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants, type TestApp } from '../helper.js'
import { send, type RawAnswer } from '../support/http.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

const PROXY = '127.0.0.1'
const TOR_EXIT = '127.0.0.6'
const json = { 'content-type': 'application/json' }

async function listen (built: TestApp): Promise<number> {
  await built.app.listen({ host: '127.0.0.1', port: 0 })
  const address = built.app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening')
  return address.port
}

interface Harness {
  built: TestApp
  port: number
  key: string
  dispatch: (forwardedFor: string | undefined, email: string, from?: string) => Promise<RawAnswer>
}

async function harness (t: Test, env: Record<string, string> = {}): Promise<Harness> {
  const dir = t.testdir({ 'tor.txt': `${TOR_EXIT}\n203.0.113.66\n` })
  const { path, keys } = writeTenants(t)
  const built = await buildApp(t, { TENANTS_FILE: path, TRUST_PROXY: PROXY, TOR_EXIT_LIST: join(dir, 'tor.txt'), ...env })
  const port = await listen(built)
  const dispatch = async (forwardedFor: string | undefined, email: string, from = PROXY): Promise<RawAnswer> => await send({
    port,
    localAddress: from,
    path: '/otp/request',
    headers: { ...json, ...bearer(keys.acmeLive), ...(forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor }) },
    body: JSON.stringify({ email })
  })
  return { built, port, key: keys.acmeLive, dispatch }
}

t.test('a Tor exit is blocked in every form that names it', async (t) => {
  const { dispatch, port } = await harness(t)
  const forms = [TOR_EXIT, `${TOR_EXIT}:4711`, `[::ffff:${TOR_EXIT}]:4711`, `::ffff:${TOR_EXIT}`, `198.51.100.1, ${TOR_EXIT}:4711`, '203.0.113.66:1', `${TOR_EXIT}:4711, 127.0.0.1:8080`]
  for (const form of forms) {
    const answer = await dispatch(form, 'a@example.com')
    t.same([answer.status, answer.body.code], [403, 'SOURCE_BLOCKED'], JSON.stringify(form))
  }
  const anonymous = await send({ port, localAddress: PROXY, path: '/otp/request', headers: { ...json, 'x-forwarded-for': `${TOR_EXIT}:4711` }, body: '{}' })
  t.same([anonymous.status, anonymous.body.code], [403, 'SOURCE_BLOCKED'], 'before the key is looked at')
  const direct = await dispatch('198.51.100.1', 'a@example.com', TOR_EXIT)
  t.same([direct.status, direct.body.code], [403, 'SOURCE_BLOCKED'], 'a Tor exit connecting itself cannot forward its way out: it is no trusted proxy')
})

t.test('an entry that names no address is refused, from the proxy only', async (t) => {
  const { dispatch, built } = await harness(t)
  const refused = ['unknown', '127.000.000.006', '2130706438', 'garbage', '_hidden', `${TOR_EXIT}:99999`, `[${TOR_EXIT}]:4711`, '[::1', '198.51.100.1, unknown', '198.51.100.1,', '']
  for (const form of refused) {
    const answer = await dispatch(form === '' ? ',' : form, 'b@example.com')
    t.same(answer.body, { success: false, message: 'X-Forwarded-For does not name a client address', code: 'INVALID_FORWARDED_FOR' }, JSON.stringify(form))
    t.equal(answer.status, 400)
  }
  t.equal(built.mail.count, 0, 'nothing was sent')
  t.equal((await dispatch('unknown, 198.51.100.1', 'b@example.com')).status, 200, 'what the client wrote before the proxy\'s entry is not read')
  t.equal((await dispatch(undefined, 'b@example.com')).status, 200, 'no header: the proxy itself is the client')
  t.equal((await dispatch('unknown', 'b@example.com', '127.0.0.2')).status, 200, 'from an untrusted hop the header is ignored')
  t.match(built.logs.text, /"remoteAddress":"198\.51\.100\.1"/, 'logs name the client, not the proxy')
})

t.test('only X-Forwarded-For is read: Forwarded and X-Real-IP are not, from the proxy or anyone', async (t) => {
  const naming = (address: string): Record<string, string> => ({ forwarded: `for=${address};proto=https`, 'x-real-ip': address })
  const open = async (env: Record<string, string>): Promise<{ built: TestApp, dispatch: (headers: Record<string, string>, email: string, from?: string) => Promise<RawAnswer> }> => {
    const { port, key, built } = await harness(t, env)
    return {
      built,
      dispatch: async (headers, email, from = PROXY) =>
        await send({ port, localAddress: from, path: '/otp/request', headers: { ...json, ...bearer(key), ...headers }, body: JSON.stringify({ email }) })
    }
  }

  const { built, dispatch } = await open({})
  t.equal((await dispatch(naming(TOR_EXIT), 'c@example.com')).status, 200, 'a Tor exit named by Forwarded and X-Real-IP from the proxy: the proxy itself is the client')
  const forwardedFor = await dispatch({ ...naming('198.51.100.1'), 'x-forwarded-for': TOR_EXIT }, 'c@example.com')
  t.same([forwardedFor.status, forwardedFor.body.code], [403, 'SOURCE_BLOCKED'], 'X-Forwarded-For decides, whatever the other two say')
  t.equal((await dispatch(naming('198.51.100.2'), 'c@example.com', TOR_EXIT)).body.code, 'SOURCE_BLOCKED', 'nor can an untrusted hop name itself another address with them')
  for (const garbage of ['unknown', '_hidden', 'for="[::1"']) {
    t.equal((await dispatch({ forwarded: garbage, 'x-real-ip': garbage }, 'c@example.com')).status, 200, `${JSON.stringify(garbage)} in them is not even looked at`)
  }
  t.equal(built.mail.count, 4)
  t.notMatch(built.logs.text, /"remoteAddress":"198\.51\.100\.[12]"/, 'logs never name an address from Forwarded or X-Real-IP')

  const limited = await open({ RATE_LIMIT_SOURCE: '3/1m' })
  const statuses: number[] = []
  for (let i = 1; i <= 4; i++) statuses.push((await limited.dispatch(naming(`198.51.100.${i}`), `d${i}@example.com`)).status)
  t.same(statuses, [200, 200, 200, 429], 'four addresses in Forwarded and X-Real-IP are one bucket, the proxy\'s')
  t.equal((await limited.dispatch({ 'x-forwarded-for': '198.51.100.1' }, 'e@example.com')).status, 200, 'while X-Forwarded-For names another source')
})

t.test('counting on Redis: one client is one bucket however it is written', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { dispatch, built } = await harness(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, RATE_LIMIT_SOURCE: '30/1m' })

  const rotate = async (write: (i: number) => string, label: string): Promise<number[]> => {
    const statuses: number[] = []
    for (let i = 0; i < 40; i++) statuses.push((await dispatch(write(i), `${label}${i}@example.com`)).status)
    return statuses
  }
  const ports = await rotate((i) => `198.51.100.7:${1000 + i}`, 'ports')
  t.same(ports, [...Array<number>(30).fill(200), ...Array<number>(10).fill(429)], 'rotating the port: 30 dispatches, then 429')
  const bare = await dispatch('198.51.100.7', 'bare@example.com')
  t.equal(bare.status, 429, 'the bare address is the same bucket')

  const v6 = await rotate((i) => `[2001:db8:1:2::${(i + 1).toString(16)}]:${2000 + i}`, 'v6')
  t.same(v6, [...Array<number>(30).fill(200), ...Array<number>(10).fill(429)], 'IPv6 with brackets and ports, one /64: one bucket')

  const sentBefore = built.mail.count
  const garbage = await rotate((i) => `junk-${i}`, 'junk')
  t.same([...new Set(garbage)], [400], 'rotating garbage: every one refused, none dispatched')
  t.equal(built.mail.count, sentBefore)

  t.equal((await dispatch('198.51.100.8:1', 'other@example.com')).status, 200, 'another client has its own bucket')
  t.equal((await dispatch('198.51.100.7', 'direct@example.com', '127.0.0.3')).status, 200, 'another socket source has its own bucket (its header is not trusted)')
})
