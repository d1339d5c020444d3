import t, { type Test } from 'tap'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants, type FixtureKeys } from '../helper.js'
import { listenApp, send, type RawAnswer } from '../support/http.js'
import { startSmtp } from '../support/mail-peers.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'

const page = { origin: 'https://app.acme.test' }

async function post (app: FastifyInstance, key: string, url: string, payload: Record<string, string>, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return await app.inject({ method: 'POST', url, headers: { ...bearer(key), ...headers }, payload })
}

async function liveUsed (app: FastifyInstance, keys: FixtureKeys): Promise<number> {
  return (await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).json().data.live.used
}

async function suite (t: Test, restart: (() => Promise<FastifyInstance>) | null, app: FastifyInstance, keys: FixtureKeys, mail: { messages: () => number }): Promise<void> {
  const suppressed = await post(app, keys.acmeLive, '/recipients/suppress', { email: 'Ada.Lovelace+news@Gmail.com' })
  t.equal(suppressed.statusCode, 200)
  t.ok(Date.parse(suppressed.json().data.suppressedUntil) > Date.now() + 29 * 86_400_000, 'for SUPPRESSION_DAYS (30 by default)')

  const before = mail.messages()
  for (const spelling of ['adalovelace@gmail.com', 'ada.lovelace@googlemail.com', 'ADA.LOVELACE+x@gmail.com']) {
    const refused = await post(app, keys.acmeLive, '/otp/request', { email: spelling })
    t.same([refused.statusCode, refused.json().code], [422, 'RECIPIENT_SUPPRESSED'], `${spelling}: every spelling is the suppressed mailbox`)
  }
  const fromPage = await post(app, keys.acmeBrowser, '/otp/request', { email: 'adalovelace@gmail.com' }, page)
  t.same([fromPage.statusCode, fromPage.json().code], [502, 'DELIVERY_FAILED'], 'a restricted key hears only what a failed delivery says')
  t.equal(mail.messages(), before, 'nothing was sent')
  t.equal(await liveUsed(app, keys), 0, 'nothing was charged')

  t.equal((await post(app, keys.acmeTest, '/otp/request', { email: 'adalovelace@gmail.com' })).statusCode, 200, 'the sandbox mode is not suppressed by a live suppression')
  t.equal((await post(app, keys.acmeLive, '/otp/request', { email: 'grace@example.com' })).statusCode, 200, 'another mailbox is not suppressed')

  const stranger = await post(app, keys.acmeBrowser, '/recipients/unsuppress', { email: 'adalovelace@gmail.com' }, page)
  t.same([stranger.statusCode, stranger.json().code], [403, 'KEY_NOT_PERMITTED'], 'a restricted key cannot lift it')
  t.equal((await post(app, keys.acmeBrowser, '/recipients/suppress', { email: 'grace@example.com' }, page)).statusCode, 403, 'nor suppress anyone')
  t.same((await post(app, keys.acmeLive, '/recipients/suppress', { email: 'not an address' })).json().code, 'INVALID_EMAIL')

  let current = app
  if (restart !== null) {
    current = await restart()
    t.equal((await post(current, keys.acmeLive, '/otp/request', { email: 'adalovelace@gmail.com' })).statusCode, 422, 'the suppression survives a restart with Redis')
  }
  const lifted = await post(current, keys.acmeLive, '/recipients/unsuppress', { email: 'ada.lovelace@gmail.com' })
  t.same(lifted.json().data, { lifted: true })
  t.equal((await post(current, keys.acmeLive, '/otp/request', { email: 'adalovelace@gmail.com' })).statusCode, 200, 'lifted: codes go out again')
  t.same((await post(current, keys.acmeLive, '/recipients/unsuppress', { email: 'ada.lovelace@gmail.com' })).json().data, { lifted: false })
}

t.test('suppression in memory: every spelling, no mail, no charge, secret keys only', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path })
  await suite(t, null, app, keys, { messages: () => mail.count })
})

t.test('suppression on Redis survives a restart', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const env = { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }
  const { app, mail } = await buildApp(t, env)
  await suite(t, async () => {
    await app.close()
    return (await buildApp(t, env)).app
  }, app, keys, { messages: () => mail.count })
})

/** A page's answer as a comparison may read it: what differs between any two requests aside. */
function comparable (answer: RawAnswer): { status: number, headers: Record<string, unknown>, body: string } {
  const headers: Record<string, unknown> = { ...answer.headers }
  delete headers.date
  delete headers['x-request-id']
  // Seconds left in a window: two requests made a moment apart may round to seconds apart by one.
  delete headers['ratelimit-reset']
  return { status: answer.status, headers, body: JSON.stringify(answer.body) }
}

/**
 * A page, which anyone can type an address into, must not tell a mailbox suppressed at this
 * tenant from one its provider refuses: not in the answer (status, body, every header), not in
 * what the next requests meet (the recipient's bucket, the allowance), and not in its timing.
 * The same requests go to each, alternately, each address from its own source, through a real
 * SMTP relay that refuses one recipient after PEER_DELAY_MS and never hears of the other.
 */
const PEER_DELAY_MS = 100
for (const store of ['memory', 'redis'] as const) {
  t.test(`a page cannot tell a suppressed mailbox from a provider's refusal, in the answer or in the next ones (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const redis = store === 'redis' ? await startRedis() : null
    t.teardown(async () => { await redis?.stop() })
    const asked: string[] = []
    const relay = await startSmtp(t, {
      onRcptTo (address, _session, callback) {
        asked.push(address.address)
        setTimeout(() => { callback(address.address === 'gone@example.com' ? Object.assign(new Error('no such user'), { responseCode: 550 }) : undefined) }, PEER_DELAY_MS)
      }
    })
    const pageTest = generateKey('restricted', 'test')
    const { path, keys } = writeTenants(t, (file) => {
      file.tenants[0]?.keys.push({ id: 'acme_page_test', kind: 'restricted', mode: 'test', sha256: hashKey(pageTest), origins: ['app.acme.test'] })
    })
    const { app } = await buildApp(t, {
      TENANTS_FILE: path,
      MAIL_TRANSPORT: 'smtp',
      SMTP_URL: `smtp://127.0.0.1:${relay.port}?tls=off`,
      MAIL_FROM: 'codes@otp.test',
      RATE_LIMIT_SOURCE: '10/1m',
      RATE_LIMIT_RECIPIENT: '3/15m',
      ...(redis === null ? {} : { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
    })
    const port = await listenApp(app)
    const call = async (key: string, path: string, email: string, localAddress: string): Promise<RawAnswer> => await send({
      port, localAddress, path, headers: { 'content-type': 'application/json', ...bearer(key), ...(key === pageTest || key === keys.acmeBrowser ? page : {}) }, body: JSON.stringify({ email })
    })
    t.equal((await call(keys.acmeLive, '/recipients/suppress', 'ada@example.com', '127.0.9.1')).status, 200)
    t.equal((await call(keys.acmeTest, '/recipients/suppress', 'ada@example.com', '127.0.9.1')).status, 200)

    for (const [mode, key, refused] of [['live', keys.acmeBrowser, 'gone@example.com'], ['sandbox', pageTest, 'fail@simulator.invalid']] as const) {
      const [suppressedSource, refusedSource] = mode === 'live' ? ['127.0.9.2', '127.0.9.3'] : ['127.0.9.4', '127.0.9.5']
      const toRefused: RawAnswer[] = []
      const toSuppressed: RawAnswer[] = []
      const waited: number[] = []
      for (let i = 0; i < 4; i++) {
        toRefused.push(await call(key, '/otp/request', refused, refusedSource))
        const started = performance.now()
        toSuppressed.push(await call(key, '/otp/request', 'ada@example.com', suppressedSource))
        waited.push(performance.now() - started)
      }
      t.strictSame(toRefused.map((answer) => answer.status), [502, 502, 502, 429], `${mode}: the refused address fails three times, then meets its recipient's bucket`)
      t.strictSame(toSuppressed.map(comparable), toRefused.map(comparable), `${mode}: the suppressed mailbox's answers are the same, header for header and byte for byte`)
      t.ok(toSuppressed.slice(0, 3).every((answer) => answer.headers['ratelimit-remaining'] !== undefined && answer.headers['ratelimit-reset'] !== undefined), `${mode}: its own source's RateLimit-*, as any failed delivery`)
      if (mode === 'live') t.ok(waited.slice(0, 3).every((ms) => ms >= PEER_DELAY_MS), `${mode}: each answer came no sooner than the relay's refusal does (${waited.map((ms) => ms.toFixed(0)).join(', ')} ms)`)
    }
    t.notOk(asked.includes('ada@example.com'), 'the relay never heard of the suppressed mailbox')
    if (redis !== null) {
      const client = await connectFailFast(redis.url)
      t.teardown(() => { client.disconnect() })
      t.strictSame(await client.keys('otp:*'), [], 'and no code is left of either')
    }
    const usage = await send({ port, localAddress: '127.0.9.1', method: 'GET', path: '/usage', headers: bearer(keys.acmeLive) })
    t.strictSame([usage.body.data?.live.used, usage.body.data?.sandbox.used], [0, 0], 'and nothing was charged for either')
  })
}

/**
 * A healthy tenant's sends are accepted, slowly (the relay takes ACCEPT_DELAY_MS to accept a
 * message), and its refusals are rare and quick (a relay refuses at RCPT, before the data). A
 * page probing one address after another must meet the same time for a suppressed mailbox and a
 * refused one from the first probe on: both answer after a send's time, never the refusal alone.
 */
const ACCEPT_DELAY_MS = 300
t.test('a healthy tenant\'s first probes: a refused and a suppressed mailbox both answer after a send\'s time', async (t) => {
  const relay = await startSmtp(t, {
    onRcptTo (address, _session, callback) {
      callback(address.address.startsWith('gone') ? Object.assign(new Error('no such user'), { responseCode: 550 }) : undefined)
    },
    onData (stream, _session, callback) {
      stream.resume()
      stream.on('end', () => { setTimeout(callback, ACCEPT_DELAY_MS) })
    }
  })
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${relay.port}?tls=off`, MAIL_FROM: 'codes@otp.test' })
  const port = await listenApp(app)
  const call = async (key: string, path: string, email: string, localAddress: string): Promise<{ answer: RawAnswer, ms: number }> => {
    const started = performance.now()
    const answer = await send({ port, localAddress, path, headers: { 'content-type': 'application/json', ...bearer(key), ...(key === keys.acmeBrowser ? page : {}) }, body: JSON.stringify({ email }) })
    return { answer, ms: performance.now() - started }
  }
  for (const [i, source] of ['127.0.10.1', '127.0.10.2', '127.0.10.3'].entries()) {
    t.equal((await call(keys.acmeLive, '/otp/request', `user${i}@example.com`, source)).answer.status, 200, 'the tenant\'s backend sends, accepted')
  }
  for (const [i, source] of ['127.0.10.4', '127.0.10.5'].entries()) t.equal((await call(keys.acmeLive, '/recipients/suppress', `bounced${i}@example.com`, source)).answer.status, 200)

  const probes = [
    ['suppressed', 'bounced0@example.com', '127.0.10.6'], ['refused', 'gone0@example.com', '127.0.10.7'],
    ['suppressed', 'bounced1@example.com', '127.0.10.8'], ['refused', 'gone1@example.com', '127.0.10.9']
  ] as const
  for (const [what, email, source] of probes) {
    const { answer, ms } = await call(keys.acmeBrowser, '/otp/request', email, source)
    t.equal(answer.status, 502, `${what}: a failed delivery`)
    t.ok(ms >= ACCEPT_DELAY_MS, `${what}: answered after a send's time (${ms.toFixed(0)} ms), not a refusal's`)
  }
})
