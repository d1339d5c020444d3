import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { BROWSER_RETRY_SECONDS } from '../../lib/admission/gate.js'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
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
  const secondSecretKey = generateKey('secret', 'live')
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]?.keys.push({ id: 'acme_live2', kind: 'secret', mode: 'live', sha256: hashKey(secondSecretKey) })
  })
  const { app, mail } = await buildApp(t, {
    TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, LOCKOUT_THRESHOLD: '3', LOCKOUT_DURATION: '3s'
  })
  const port = await listenApp(app)
  const call = async (key: string, path: string, body: unknown, localAddress = '127.0.0.31', extra: Record<string, string> = {}) => await send({
    port, localAddress, path, headers: { ...json, ...bearer(key), ...extra }, body: JSON.stringify(body)
  })
  const dispatch = async (email: string) => await call(keys.acmeLive, '/otp/request', { email })
  const verify = async (requestId: string, userGuess: string, localAddress?: string, key = keys.acmeLive) => await call(key, '/otp/verify', { requestId, userGuess }, localAddress)

  // Five codes outstanding for one person, under spellings of one mailbox.
  const outstanding: Array<{ requestId: string, code: string }> = []
  for (const email of ['victim@example.com', 'Victim+a@example.com', 'victim+b@example.com', 'VICTIM@example.com', 'victim+c@example.com']) {
    const sent = await dispatch(email)
    t.equal(sent.status, 200)
    outstanding.push({ requestId: sent.body.data.requestId, code: mail.codeFor(email) })
  }
  const [a, b, c, d, e] = outstanding as [typeof outstanding[0], typeof outstanding[0], typeof outstanding[0], typeof outstanding[0], typeof outstanding[0]]
  // Three wrong guesses in a row, from different sources, requestIds and API keys: the mailbox is locked.
  for (const [index, guess] of [a, b, c].entries()) {
    t.equal((await verify(guess.requestId, wrong(guess.code), `127.0.0.${40 + index}`, index === 1 ? secondSecretKey : keys.acmeLive)).status, 400)
  }
  const right = await verify(d.requestId, d.code)
  t.same([right.status, right.body.code], [400, 'CODE_MISMATCH'], 'a code minted before the lock fails even with the right guess, like any wrong one')
  const locked = await dispatch('victim@example.com')
  t.same([locked.status, locked.body.code], [429, 'RATE_LIMITED'], 'no new code while locked')
  const firstRetry = Number(locked.headers['retry-after'])
  t.ok(firstRetry >= 1 && firstRetry <= 3, `a backend hears when the 3 s lock ends (retry after ${firstRetry} s)`)

  // Polled until the lock ends (each poll that is admitted mails a code, which is fine here).
  let after = locked
  for (const deadline = Date.now() + 15_000; after.status === 429 && Date.now() < deadline;) {
    await sleep(200)
    after = await dispatch('victim@example.com')
  }
  t.equal(after.status, 200, 'the lock ended by itself')
  const guessing = Date.now()
  t.equal((await verify(e.requestId, wrong(e.code))).status, 400, 'the run goes on')
  const longer = await dispatch('victim@example.com')
  t.equal(longer.status, 429)
  const secondRetry = Number(longer.headers['retry-after'])
  // The lock ends 6 s from the wrong guess: what Retry-After says plus the time since the guess
  // was sent is at least 6, and at most 4 (3 s, rounded up) were the lock not doubled, however
  // long the machine took between the guess and the dispatch.
  const sinceGuessS = (Date.now() - guessing) / 1000
  t.ok(secondRetry + sinceGuessS > 5 && secondRetry <= 6, `the next wrong guess in the run locks twice as long (retry after ${secondRetry} s, ${sinceGuessS.toFixed(1)} s after the guess)`)

  const fromPage = await call(keys.acmeBrowser, '/recipients/unlock', { email: 'victim@example.com' }, undefined, { origin: 'https://app.acme.test' })
  t.same([fromPage.status, fromPage.body.code], [403, 'KEY_NOT_PERMITTED'], 'a public key cannot clear a lock')
  const unlocked = await call(keys.acmeLive, '/recipients/unlock', { email: 'Victim+x@example.com' })
  t.same([unlocked.status, unlocked.body.data], [200, { cleared: true }], 'the tenant clears it, under any spelling')
  t.equal((await dispatch('victim@example.com')).status, 200, 'codes flow again')
  t.same((await call(keys.acmeLive, '/recipients/unlock', { email: 'victim@example.com' })).body.data, { cleared: false })
  const sandbox = await call(keys.acmeTest, '/recipients/unlock', { email: 'not an address' })
  t.same([sandbox.status, sandbox.body.code], [400, 'INVALID_EMAIL'])
})

/*
 * The cap bounds what all tenants together send one mailbox. Were it all, tenants held by one
 * attacker could fill it and shut every other tenant's backend out of that user (red team, round
 * 5, F4): each tenant keeps a reserve of two codes inside it.
 */
for (const store of ['memory', 'redis'] as const) {
  t.test(`a mailbox is protected across tenants: one service-wide cap, a reserve per tenant inside it, sandbox counted apart (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const redis = store === 'redis' ? await startRedis() : null
    t.teardown(async () => { await redis?.stop() })
    const others = ['globex', 'initech', 'hooli'].map((id) => ({ id, key: generateKey('secret', 'live') }))
    const { path, keys } = writeTenants(t, (file) => {
      for (const { id, key } of others) {
        const tenant = file.tenants.find((candidate) => candidate.id === id)
        const entry = { id: `${id}_live`, kind: 'secret' as const, mode: 'live' as const, sha256: hashKey(key) }
        if (tenant === undefined) file.tenants.push({ id, tier: 'standard', keys: [entry] })
        else tenant.keys.push(entry)
      }
    })
    // The defaults, spelled out: five per tenant, fifteen from all together.
    const shared = { TENANTS_FILE: path, RATE_LIMIT_MAILBOX: '15/15m', RATE_LIMIT_RECIPIENT: '5/15m', ...(redis === null ? {} : { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }) }
    // On Redis, two instances: the cap and the tenants' counts are shared through it.
    const a = await buildApp(t, shared)
    const b = redis === null ? a : await buildApp(t, shared)
    const dispatch = async (built: typeof a, key: string, email: string) =>
      await built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })

    for (const { id, key } of others) {
      const statuses = []
      for (let i = 0; i < 6; i++) statuses.push((await dispatch(i % 2 === 0 ? a : b, key, i % 2 === 0 ? 'person@example.com' : 'Person+x@example.com')).statusCode)
      t.same(statuses, [200, 200, 200, 200, 200, 429], `${id} sends its five, then meets its own recipient limit`)
    }
    t.equal((await dispatch(a, keys.acmeLive, 'person@example.com')).statusCode, 200, 'the cap is full, but acme\'s backend still reaches its user…')
    t.equal((await dispatch(b, keys.acmeLive, 'PERSON@example.com')).statusCode, 200, '…twice: its reserve')
    const capped = await dispatch(a, keys.acmeLive, 'person+y@example.com')
    t.same([capped.statusCode, capped.json().code], [429, 'RATE_LIMITED'], 'then the cap: the person gets at most fifteen, and two from each tenant beyond')
    // Worded as the tenant's own recipient limit, with the cap's whole window: no other tenant's figure.
    t.same([capped.json().message, capped.headers['retry-after']], ['Too many requests for this recipient; retry in 900 s', '900'])
    t.equal((await dispatch(b, keys.acmeTest, 'person@example.com')).statusCode, 200, 'sandbox keys send no mail and are counted apart')
    t.equal((await dispatch(a, others[0]?.key ?? '', 'someone.else@example.com')).statusCode, 200, 'other people are not affected')
  })
}

/*
 * A stranger holds public keys only. Every code he can guess is one he asked for through a
 * restricted key (requestIds are secret), so his wrong guesses lock the mailbox's browser lane,
 * from any number of sources and keys, and never its backend lane: the owner's way in through
 * the partner's backend. His own 429 does not tell when the lock ends.
 */
for (const store of ['memory', 'redis'] as const) {
  t.test(`a stranger with public keys locks the browser lane only: the owner's backend still gets in (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const redis = store === 'redis' ? await startRedis() : null
    t.teardown(async () => { await redis?.stop() })
    const secondPageKey = generateKey('restricted', 'live')
    const { path, keys } = writeTenants(t, (file) => {
      file.tenants[0]?.keys.push({ id: 'acme_page2', kind: 'restricted', mode: 'live', sha256: hashKey(secondPageKey), origins: ['app.acme.test'] })
    })
    // The documented lockout defaults: ten wrong guesses lock for 15 minutes.
    const { app, mail } = await buildApp(t, { TENANTS_FILE: path, ...(redis === null ? {} : { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }) })
    const port = await listenApp(app)
    const page = { origin: 'https://app.acme.test' }
    const pageKeys = [keys.acmeBrowser, secondPageKey]
    const call = async (key: string, path: string, body: unknown, localAddress: string) => await send({
      port, localAddress, path, headers: { ...json, ...bearer(key), ...(key === keys.acmeLive ? {} : page) }, body: JSON.stringify(body)
    })
    const askCode = async (key: string, email: string, source: string): Promise<{ requestId: string, code: string }> => {
      const answer = await call(key, '/otp/request', { email }, source)
      t.equal(answer.status, 200)
      return { requestId: answer.body.data.requestId, code: mail.codeFor(email) }
    }

    const owners = await askCode(keys.acmeLive, 'victim@example.com', '127.0.0.70')
    // Nine wrong guesses through both public keys, each from its own source, under two spellings.
    for (let i = 0; i < 9; i++) {
      const email = i % 2 === 0 ? 'victim@example.com' : 'Victim+x@example.com'
      const { requestId, code } = await askCode(pageKeys[i % 2] ?? '', email, `127.0.3.${i + 1}`)
      t.equal((await call(pageKeys[(i + 1) % 2] ?? '', '/otp/verify', { requestId, userGuess: wrong(code) }, `127.0.5.${i + 1}`)).status, 400)
    }
    const outstanding = await askCode(keys.acmeBrowser, 'victim@example.com', '127.0.3.20')
    const tenth = await askCode(secondPageKey, 'victim@example.com', '127.0.3.21')
    t.equal((await call(keys.acmeBrowser, '/otp/verify', { requestId: tenth.requestId, userGuess: wrong(tenth.code) }, '127.0.3.22')).status, 400)

    const refusals = []
    for (let i = 0; i < 20; i++) refusals.push(await call(pageKeys[i % 2] ?? '', '/otp/request', { email: 'victim@example.com' }, `127.0.4.${i + 1}`))
    t.ok(refusals.every((answer) => answer.status === 429 && answer.body.code === 'RATE_LIMITED'), 'the tenth wrong guess in a row, across sources and keys, locked the browser lane: from any source and key, no code')
    t.ok(refusals.every((answer) => answer.headers['retry-after'] === String(BROWSER_RETRY_SECONDS) && answer.body.message === `Too many requests; retry in ${BROWSER_RETRY_SECONDS} s`), 'the stranger\'s 429 says a constant minute, not the 15-minute lock')
    t.ok(refusals.every((answer) => Object.keys(answer.headers).every((name) => !name.startsWith('ratelimit-'))), 'and names no bucket')
    const unread = await call(keys.acmeBrowser, '/otp/verify', { requestId: outstanding.requestId, userGuess: outstanding.code }, '127.0.3.23')
    t.same([unread.status, unread.body.code], [400, 'CODE_MISMATCH'], 'a browser-lane code sent before the lock is consumed unread, even guessed right')

    const ownersVerify = await call(keys.acmeLive, '/otp/verify', { requestId: owners.requestId, userGuess: owners.code }, '127.0.0.70')
    t.equal(ownersVerify.status, 200, 'the code the owner\'s backend asked for before the attack verifies')
    const again = await askCode(keys.acmeLive, 'victim@example.com', '127.0.0.70')
    t.equal((await call(keys.acmeLive, '/otp/verify', { requestId: again.requestId, userGuess: again.code }, '127.0.0.70')).status, 200, 'and the backend gets and verifies new ones')

    const unlocked = await call(keys.acmeLive, '/recipients/unlock', { email: 'victim@example.com' }, '127.0.0.70')
    t.same(unlocked.body.data, { cleared: true }, 'the tenant clears the browser lane')
    t.equal((await call(keys.acmeBrowser, '/otp/request', { email: 'victim@example.com' }, '127.0.3.30')).status, 200, 'and pages get codes again')
  })

  t.test(`what a stranger fills through public keys is the browser lane's: the owner's backend still reaches the mailbox (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    const redis = store === 'redis' ? await startRedis() : null
    t.teardown(async () => { await redis?.stop() })
    const globexPage = generateKey('restricted', 'live')
    const { path, keys } = writeTenants(t, (file) => {
      file.tenants[1]?.keys.push({ id: 'globex_page', kind: 'restricted', mode: 'live', sha256: hashKey(globexPage), origins: ['app.globex.test'] })
    })
    const { app } = await buildApp(t, {
      TENANTS_FILE: path, RATE_LIMIT_RECIPIENT: '3/15m', RATE_LIMIT_MAILBOX: '5/15m', ...(redis === null ? {} : { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
    })
    const port = await listenApp(app)
    const dispatch = async (key: string, origin: string | null, source: string) => await send({
      port, localAddress: source, path: '/otp/request', headers: { ...json, ...bearer(key), ...(origin === null ? {} : { origin }) }, body: JSON.stringify({ email: 'victim@example.com' })
    })
    const acme = []
    for (let i = 0; i < 4; i++) acme.push((await dispatch(keys.acmeBrowser, 'https://app.acme.test', `127.0.6.${i + 1}`)).status)
    t.same(acme, [200, 200, 200, 429], 'the browser lane of acme\'s recipient bucket is full')
    const globex = []
    for (let i = 0; i < 3; i++) globex.push((await dispatch(globexPage, 'https://app.globex.test', `127.0.7.${i + 1}`)).status)
    t.same(globex, [200, 200, 429], 'and, with globex\'s public key, the browser lane of the service-wide mailbox cap')
    const backend = await dispatch(keys.acmeLive, null, '127.0.0.71')
    t.equal(backend.status, 200, 'the owner\'s backend still sends a code: its lane has its own recipient bucket and cap')
  })
}
