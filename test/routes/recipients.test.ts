import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { generateKey, hashKey } from '../../lib/tenants/api-keys.js'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

const json = { 'content-type': 'application/json' }

function wrong (code: string): string {
  return String((Number(code) + 1) % 1_000_000).padStart(6, '0')
}

t.test('brute force against one mailbox meets an escalating lock that covers its outstanding codes', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const { app, mail } = await buildApp(t, {
    TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, LOCKOUT_THRESHOLD: '3', LOCKOUT_DURATION: '1s'
  })
  const port = await listenApp(app)
  const call = async (key: string, path: string, body: unknown, localAddress = '127.0.0.31', extra: Record<string, string> = {}) => await send({
    port, localAddress, path, headers: { ...json, ...bearer(key), ...extra }, body: JSON.stringify(body)
  })
  const dispatch = async (email: string) => await call(keys.acmeLive, '/otp/request', { email })
  const verify = async (requestId: string, userGuess: string, localAddress?: string) => await call(keys.acmeLive, '/otp/verify', { requestId, userGuess }, localAddress)

  // Five codes outstanding for one person, under spellings of one mailbox.
  const outstanding: Array<{ requestId: string, code: string }> = []
  for (const email of ['victim@example.com', 'Victim+a@example.com', 'victim+b@example.com', 'VICTIM@example.com', 'victim+c@example.com']) {
    const sent = await dispatch(email)
    t.equal(sent.status, 200)
    outstanding.push({ requestId: sent.body.data.requestId, code: mail.codeFor(email) })
  }
  const [a, b, c, d, e] = outstanding as [typeof outstanding[0], typeof outstanding[0], typeof outstanding[0], typeof outstanding[0], typeof outstanding[0]]
  // Three wrong guesses in a row, from different sources and requestIds: the mailbox is locked.
  for (const [index, guess] of [a, b, c].entries()) t.equal((await verify(guess.requestId, wrong(guess.code), `127.0.0.${40 + index}`)).status, 400)
  const right = await verify(d.requestId, d.code)
  t.same([right.status, right.body.code], [400, 'CODE_MISMATCH'], 'a code minted before the lock fails even with the right guess, like any wrong one')
  const locked = await dispatch('victim@example.com')
  t.same([locked.status, locked.body.code], [429, 'RATE_LIMITED'], 'no new code while locked')
  t.equal(locked.headers['retry-after'], '1')

  await sleep(1100)
  t.equal((await verify(e.requestId, wrong(e.code))).status, 400, 'the lock ended; the run goes on')
  const longer = await dispatch('victim@example.com')
  t.equal(longer.status, 429)
  t.equal(longer.headers['retry-after'], '2', 'the next wrong guess in the run locks twice as long')

  const fromPage = await call(keys.acmeBrowser, '/recipients/unlock', { email: 'victim@example.com' }, undefined, { origin: 'https://app.acme.test' })
  t.same([fromPage.status, fromPage.body.code], [403, 'KEY_NOT_PERMITTED'], 'a public key cannot clear a lock')
  const unlocked = await call(keys.acmeLive, '/recipients/unlock', { email: 'Victim+x@example.com' })
  t.same([unlocked.status, unlocked.body.data], [200, { cleared: true }], 'the tenant clears it, under any spelling')
  t.equal((await dispatch('victim@example.com')).status, 200, 'codes flow again')
  t.same((await call(keys.acmeLive, '/recipients/unlock', { email: 'victim@example.com' })).body.data, { cleared: false })
  const sandbox = await call(keys.acmeTest, '/recipients/unlock', { email: 'not an address' })
  t.same([sandbox.status, sandbox.body.code], [400, 'INVALID_EMAIL'])
})

t.test('a mailbox is protected across tenants: one service-wide cap, sandbox counted apart', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const globexLive = generateKey('secret', 'live')
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[1]?.keys.push({ id: 'globex_live', kind: 'secret', mode: 'live', sha256: hashKey(globexLive) })
  })
  const shared = { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, RATE_LIMIT_MAILBOX: '4/15m', RATE_LIMIT_RECIPIENT: '3/15m' }
  // Two instances: the cap is shared through Redis.
  const a = await buildApp(t, shared)
  const b = await buildApp(t, shared)
  const dispatch = async (built: typeof a, key: string, email: string) =>
    await built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })

  for (let i = 0; i < 3; i++) t.equal((await dispatch(a, keys.acmeLive, 'person@example.com')).statusCode, 200, 'acme sends its three')
  t.equal((await dispatch(b, keys.acmeLive, 'person@example.com')).statusCode, 429, 'acme\'s own recipient limit')
  t.equal((await dispatch(b, globexLive, 'Person@example.com')).statusCode, 200, 'globex has its own budget…')
  const capped = await dispatch(a, globexLive, 'person+x@example.com')
  t.same([capped.statusCode, capped.json().code], [429, 'RATE_LIMITED'], '…but the person gets no more than four mails in the window, from every tenant together')
  t.match(capped.json().message, /mailbox/)
  t.equal((await dispatch(a, keys.globexTest, 'person@example.com')).statusCode, 200, 'sandbox keys send no mail and are counted apart')
  t.equal((await dispatch(a, globexLive, 'someone.else@example.com')).statusCode, 200, 'other people are not affected')
})
