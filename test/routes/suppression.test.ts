import t, { type Test } from 'tap'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants, type FixtureKeys } from '../helper.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

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
