import t from 'tap'
import { Redis } from 'ioredis'
import { bearer, buildApp, readiness, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { sesStore, startSesLocal, startSesProxy, startSilentPeer, startSmtp } from '../support/mail-peers.js'
import { until } from '../support/wait.js'
import { freePort, redisTestOptions, startRedis } from '../support/redis.js'

// The SDK reads credentials from its standard chain; the emulator accepts any.
process.env.AWS_ACCESS_KEY_ID = 'test'
process.env.AWS_SECRET_ACCESS_KEY = 'test'

const codeIn = (text: string | undefined): string => /\b(\d{6})\b/.exec(text ?? '')?.[1] ?? ''

t.test('SES: a live key delivers through SES v2; the code from the mail verifies', async (t) => {
  const ses = await startSesLocal(t)
  const { path, keys } = writeTenants(t, (file) => { file.tenants[0]!.brand = { name: 'Acme', from: 'codes@acme.test', replyTo: 'help@acme.test' } })
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses, MAIL_FROM: 'no-reply@otp.test' })
  const ready = await readiness(app)
  t.same(ready.body.checks.mailer, { ok: true, kind: 'ses' }, '/readyz names the transport')

  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'Kim@Example.com', locale: 'fr' } })
  t.equal(sent.statusCode, 200)
  const [mail] = await sesStore(ses)
  t.ok(mail, 'the emulator received one message')
  t.same(mail!.destination.to, ['Kim@example.com'], 'to the address as given, domain lower-cased')
  t.match(mail!.from, 'codes@acme.test', "the tenant's sender")
  t.same(mail!.replyTo, ['help@acme.test'])
  const code = codeIn(mail!.body.text)
  t.match(code, /^\d{6}$/, 'the text part carries the code')
  t.notMatch(mail!.subject, code, 'never in the subject')
  t.match(mail!.subject, /Acme/)
  t.match(mail!.body.text, /minutes/, 'the lifetime is stated')
  t.match(mail!.body.html, new RegExp(code), 'the HTML part carries the code')
  t.match(mail!.body.html, /lang="fr"/, 'the body locale wins')
  t.match(mail!.body.text, /code/i)

  const verified = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: sent.json().data.requestId, userGuess: code } })
  t.equal(verified.statusCode, 200)

  await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeLive), 'accept-language': 'de-CH;q=0.9, en;q=0.5' }, payload: { email: 'lu@example.com' } })
  const german = (await sesStore(ses)).find((email) => email.destination.to[0] === 'lu@example.com')
  t.match(german?.body.html, /lang="de"/, 'Accept-Language picks the locale when the body does not')
})

t.test('SES: dispatches sent while a call is in flight each answer for their own destination', async (t) => {
  const ses = await startSesLocal(t)
  const proxy = await startSesProxy(t, ses)
  proxy.refuse.add('refused@example.com')
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: proxy.endpoint, MAIL_FROM: 'no-reply@otp.test' })
  const dispatch = async (email: string): Promise<{ statusCode: number, json: () => any }> =>
    await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email } })

  // The first call stays in flight while the others arrive: they wait for their batch. Which
  // of them share a SendBulkEmail depends on when each arrives; the transport's tests pin that.
  proxy.hold((request) => request.to[0] === 'first@example.com')
  const first = dispatch('first@example.com')
  await until('the first call reaches SES', () => proxy.requests.length === 1)
  const names = ['one@example.com', 'refused@example.com', 'two@example.com']
  const answers = await Promise.all(names.map(dispatch))
  proxy.release()
  t.equal((await first).statusCode, 200)
  t.same(answers.map((answer) => answer.statusCode), [200, 502, 200], 'the refused destination answers 502, its batch-mates 200')
  t.equal(answers[1]?.json().code, 'DELIVERY_FAILED')
  t.comment(`calls after the first: ${JSON.stringify(proxy.requests.slice(1))}`)
  const usage = await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })
  t.equal(usage.json().data.live.used, 3, 'the three delivered dispatches are charged, the refused one is not')
  const stored = await sesStore(ses)
  for (const [index, email] of names.entries()) {
    if (index === 1) continue
    const mail = stored.find((candidate) => candidate.destination.to[0] === email)
    const code = codeIn(mail?.body.text)
    const verified = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: answers[index]?.json().data.requestId, userGuess: code } })
    t.equal(verified.statusCode, 200, `${email}: the code in its own mail verifies its own request`)
  }
})

t.test('SES: sandbox keys never reach the provider; the sandbox inbox has the code', async (t) => {
  const ses = await startSesLocal(t)
  const { path, keys } = writeTenants(t, (file) => { file.tenants[0]!.brand = { name: '<script>alert("x")</script> & \'Co\'' } })
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses, MAIL_FROM: 'no-reply@otp.test' })
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeTest), payload: { email: 'Max@Example.com' } })
  t.equal(sent.statusCode, 200)
  t.same(await sesStore(ses), [], 'nothing reached SES')

  const inbox = await app.inject({ method: 'GET', url: '/sandbox/messages?email=max%40example.com', headers: bearer(keys.acmeTest) })
  t.equal(inbox.statusCode, 200)
  const [message] = inbox.json().data.messages
  t.equal(message.requestId, sent.json().data.requestId)
  t.match(message.code, /^\d{6}$/)
  t.notMatch(message.html, /<script>/, 'the brand is escaped in HTML')
  t.match(message.html, /&lt;script&gt;alert\(&quot;x&quot;\)&lt;\/script&gt; &amp; &#39;Co&#39;/)
  t.equal((await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeTest), payload: { requestId: message.requestId, userGuess: message.code } })).statusCode, 200)

  await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeTest), payload: { email: 'max@example.com' } })
  const twice = (await app.inject({ method: 'GET', url: '/sandbox/messages?email=MAX@example.com', headers: bearer(keys.acmeTest) })).json().data.messages
  t.equal(twice.length, 2)
  t.ok(twice[0].createdAt >= twice[1].createdAt, 'newest first')

  const live = await app.inject({ method: 'GET', url: '/sandbox/messages?email=max@example.com', headers: bearer(keys.acmeLive) })
  t.equal(live.statusCode, 404, 'a live key has no sandbox')
  t.equal(live.json().code, 'NOT_FOUND')
  const foreign = await app.inject({ method: 'GET', url: '/sandbox/messages?email=max@example.com', headers: bearer(keys.globexTest) })
  t.same(foreign.json().data.messages, [], "another tenant's sandbox key sees nothing")
  const bad = await app.inject({ method: 'GET', url: '/sandbox/messages?email=nope', headers: bearer(keys.acmeTest) })
  t.equal(bad.json().code, 'INVALID_EMAIL')
})

t.test('sandbox simulator: reserved recipients fail as documented and leave nothing', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TIMEOUT_MS: '300' })
  for (const [email, kind] of [['fail@simulator.invalid', 'rejected'], ['throttled@simulator.invalid', 'throttled'], ['slow@simulator.invalid', 'timeout']] as const) {
    const started = Date.now()
    const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeTest), payload: { email } })
    t.equal(answer.statusCode, 502, email)
    t.same(answer.json(), { success: false, message: 'The code could not be delivered; nothing was charged', code: 'DELIVERY_FAILED' })
    if (kind === 'timeout') t.ok(Date.now() - started >= 290, 'the slow recipient waits for the mail timeout')
    const inbox = await app.inject({ method: 'GET', url: `/sandbox/messages?email=${email}`, headers: bearer(keys.acmeTest) })
    t.same(inbox.json().data.messages, [], 'nothing reached the inbox')
  }
  const usage = await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })
  t.equal(usage.json().data.sandbox.used, 0, 'failed deliveries were not charged')
})

t.test('SMTP: delivery through a real SMTP server, with and without auth', async (t) => {
  for (const auth of [false, true]) {
    const peer = await startSmtp(t, auth
      ? { authOptional: false, onAuth (login, _session, callback) { callback(login.username === 'mailer' && login.password === 's3cret' ? null : new Error('bad'), { user: login.username }) } }
      : {})
    const { path, keys } = writeTenants(t)
    const url = auth ? `smtp://mailer:s3cret@127.0.0.1:${peer.port}?tls=off` : `smtp://127.0.0.1:${peer.port}?tls=off`
    const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'smtp', SMTP_URL: url, MAIL_FROM: 'Codes <codes@otp.test>' })
    const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'ola@example.com', locale: 'es' } })
    t.equal(sent.statusCode, 200, auth ? 'with AUTH' : 'without AUTH')
    const [mail] = peer.received
    t.equal(mail?.to && !Array.isArray(mail.to) ? mail.to.value[0]?.address : '', 'ola@example.com')
    t.equal(mail?.from?.value[0]?.address, 'codes@otp.test')
    const code = codeIn(mail?.text)
    t.notMatch(mail?.subject ?? '', code)
    t.match(String(mail?.html), /lang="es"/)
    t.equal((await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: sent.json().data.requestId, userGuess: code } })).statusCode, 200)
  }
})

t.test('boot: MAIL_TRANSPORT needs its settings', async (t) => {
  await t.rejects(buildApp(t, { MAIL_TRANSPORT: 'ses', MAIL_FROM: 'a@b.co' }), /AWS_REGION is required/)
  await t.rejects(buildApp(t, { MAIL_TRANSPORT: 'smtp', MAIL_FROM: 'a@b.co' }), /SMTP_URL is required/)
  await t.rejects(buildApp(t, { MAIL_TRANSPORT: 'smtp', SMTP_URL: 'smtp://127.0.0.1:1' }), /MAIL_FROM is required/)
})

t.test('failures answer 502 within the timeout and leave no code behind', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  const silent = await startSilentPeer(t)
  const closed = await freePort()
  const peers = {
    'SMTP, closed port': { MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${closed}?tls=off` },
    'SMTP, silent peer': { MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${silent}?tls=off` },
    'SES, closed port': { MAIL_TRANSPORT: 'ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: `http://127.0.0.1:${closed}` },
    'SES, silent peer': { MAIL_TRANSPORT: 'ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: `http://127.0.0.1:${silent}` }
  }
  for (const [name, env] of Object.entries(peers)) {
    const { path, keys } = writeTenants(t)
    const { app, logs } = await buildApp(t, { ...env, TENANTS_FILE: path, MAIL_FROM: 'no-reply@otp.test', MAIL_TIMEOUT_MS: '800', REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
    await client.flushall()
    const started = Date.now()
    const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'pat@example.com' } })
    t.equal(answer.statusCode, 502, `${name}: 502`)
    t.equal(answer.json().code, 'DELIVERY_FAILED')
    t.ok(Date.now() - started < 800 + 3000, `${name}: within the timeout (generous bound for noisy machines)`)
    t.same(await client.keys('otp:*'), [], `${name}: the code was destroyed`)
    t.equal((await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).json().data.live.used, 0, `${name}: not charged`)
    t.match(logs.text, /"msg":"delivery failed"/)
    t.match(logs.text, /"kind":"(connection|timeout)"/, `${name}: the log names the error kind`)
    t.notMatch(logs.text, /pat@example\.com/, 'but never the address')
  }
})
