import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { mock } from 'node:test'
import t from 'tap'
import { run } from '../../cli/keys.js'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { startReceiver, webhookSecret } from '../support/webhook-receiver.js'
import { listenApp, send } from '../support/http.js'
import { startSmtp } from '../support/mail-peers.js'

const CODE = '135790'
const sha256 = (value: string): string => createHash('sha256').update(value).digest('hex')
const inDays = (days: number): string => new Date(Date.now() + days * 86_400_000).toISOString()
const REVIEW_USED = 'review address used: no mail sent, nothing charged'

/** The service's log lines, parsed, with exactly this message. */
function logLines (text: string, msg: string): Array<Record<string, unknown>> {
  return text.split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === msg)
}

t.test('review address: no mail, no charge, the fixed code verifies once, every use reported', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const secret = webhookSecret()
  const receiver = await startReceiver(t, secret)
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.reviewAddresses = [
      { address: 'Reviewer@Acme.test', codeSha256: sha256(CODE), expiresAt: inDays(30) },
      { address: 'old-reviewer@acme.test', codeSha256: sha256(CODE), expiresAt: inDays(-1) }
    ]
    file.tenants[0]!.webhooks = [{ url: receiver.url, secret, events: ['review.used'] }]
  })
  const { app, mail, logs } = await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true', LOCKOUT_THRESHOLD: '3' })
  t.same(logLines(logs.text, '/tenants/0/reviewAddresses/1: the review address has expired and is ignored').map((line) => line.level), [40], 'an expired entry is ignored with one warning naming its place')
  t.notMatch(logs.text, /old-reviewer/i, 'the warning never names the address')
  const dispatch = async (email: string) => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email } })
  const verify = async (requestId: string, userGuess: string) => await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess } })
  const used = async (): Promise<number> => (await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).json().data.live.used

  const first = await dispatch('reviewer@acme.test')
  t.equal(first.statusCode, 200)
  t.equal(first.headers['quota-remaining'], '1000', 'the answer shows nothing charged')
  t.equal(mail.count, 0, 'no mail')
  t.equal(await used(), 0, 'no charge')
  const { requestId } = first.json().data
  const verified = await verify(requestId, CODE)
  t.equal(verified.statusCode, 200, 'the fixed code verifies')
  t.match(verified.json().data.receipt, /^ey/, 'with a receipt, as any code')
  t.equal((await verify(requestId, CODE)).statusCode, 400, 'once')

  const other = (await dispatch('REVIEWER@acme.test')).json().data.requestId as string
  t.equal((await verify(other, '000000')).json().code, 'CODE_MISMATCH', 'a wrong guess is wrong')
  t.equal((await verify(other, CODE)).statusCode, 400, 'and used the code up')

  // Wrong guesses count toward the lockout like any other code's.
  const reviewed = [requestId, other]
  for (let i = 0; i < 2; i++) {
    const next = (await dispatch('reviewer@acme.test')).json().data.requestId as string
    reviewed.push(next)
    await verify(next, '000000')
  }
  const locked = await dispatch('reviewer@acme.test')
  t.equal(locked.statusCode, 429, 'three wrong guesses lock the review address too')

  const normal = await dispatch('ada@example.com')
  t.equal((await verify(normal.json().data.requestId, CODE)).statusCode, 400, 'the review code verifies nothing else')
  t.equal(mail.count, 1, 'an ordinary address gets its mail')
  t.equal((await dispatch('old-reviewer@acme.test')).statusCode, 200)
  t.equal(mail.count, 2, 'an expired review address is an ordinary one')

  const uses = (await app.metrics.registry.getSingleMetric('email_otp_review_uses_total')?.get())?.values.find((value) => value.labels.mode === 'live')?.value
  t.equal(uses, 4, 'every use counted')
  t.same(
    logLines(logs.text, REVIEW_USED).map(({ level, tenant, mode, keyId, source, requestId }) => ({ level, tenant, mode, keyId, source, requestId })),
    reviewed.map((id) => ({ level: 40, tenant: 'acme', mode: 'live', keyId: 'acme_live', source: '127.0.0.1', requestId: id })),
    'each use logged once, as a warning naming the tenant, mode, key, source and request'
  )
  await receiver.waitFor(() => receiver.verified.length >= 4, 'four review.used webhooks')
  t.match(receiver.verified[0]?.payload, { type: 'review.used', data: { tenant: 'acme', mode: 'live', requestId, keyId: 'acme_live', source: '127.0.0.1', addressHash: /^[A-Za-z0-9_-]{22}$/ } })
  t.notMatch(JSON.stringify(receiver.verified.map((hook) => hook.payload)), /reviewer@/, 'never the address')
})

t.test('review address: one valid at load stops being a review address at its expiry, without a reload', async (t) => {
  const expiresAtMs = Date.now() + 86_400_000
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.reviewAddresses = [{ address: 'reviewer@acme.test', codeSha256: sha256(CODE), expiresAt: new Date(expiresAtMs).toISOString() }]
  })
  const { app, mail, logs } = await buildApp(t, { TENANTS_FILE: path })
  // The service reads Date: node:test's MockTimers moves it, with nothing reloaded meanwhile.
  mock.timers.enable({ apis: ['Date'], now: Date.now() })
  t.teardown(() => { mock.timers.reset() })
  const dispatch = async () => await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'reviewer@acme.test' } })
  const verify = async (requestId: string, userGuess: string) => await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId, userGuess } })

  mock.timers.tick(expiresAtMs - Date.now() - 1)
  const last = (await dispatch()).json().data.requestId as string
  t.equal(mail.count, 0, 'a millisecond before its expiry: still a review address, no mail')
  t.equal((await verify(last, CODE)).statusCode, 200, 'and the fixed code verifies')

  mock.timers.tick(1)
  const after = (await dispatch()).json().data.requestId as string
  t.equal(mail.count, 1, 'at its expiry: an ordinary address, its mail sent')
  t.equal((await verify(after, CODE)).json().code, 'CODE_MISMATCH', 'the fixed code no longer verifies (a wrong guess, as for any code)')
  t.same(logLines(logs.text, REVIEW_USED).map((line) => line.requestId), [last], 'only the use before the expiry was reported')
})

t.test('review address: the expiry is required and at most 90 days ahead; a bad entry refuses its tenant alone', async (t) => {
  const refusedFor = async (mutate: (file: TenantsFile) => void, problem: RegExp, what: string): Promise<void> => {
    const { path, keys } = writeTenants(t, mutate)
    const { app, logs } = await buildApp(t, { TENANTS_FILE: path })
    const refused = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeTest), payload: { email: 'someone@acme.test' } })
    t.same({ status: refused.statusCode, code: refused.json().code }, { status: 503, code: 'TENANT_MISCONFIGURED' }, `${what}: the tenant's keys answer 503`)
    t.match(logs.text, problem, `${what}: the log line names the problem's place`)
    const other = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.globexTest), payload: { email: 'someone@globex.test' } })
    t.equal(other.statusCode, 200, `${what}: the other tenant is served`)
  }
  await refusedFor((file) => { file.tenants[0]!.reviewAddresses = [{ address: 'r@acme.test', codeSha256: sha256(CODE), expiresAt: inDays(91) }] }, /reviewAddresses\/0\/expiresAt[^\n]*more than 90 days ahead/, 'an expiry past 90 days')
  await refusedFor((file) => { file.tenants[0]!.reviewAddresses = [{ address: 'r@acme.test', codeSha256: sha256(CODE) } as never] }, /reviewAddresses\/0[^\n]*expiresAt/, 'no expiry')
  await refusedFor((file) => { file.tenants[0]!.reviewAddresses = [{ address: 'r@acme.test', codeSha256: CODE, expiresAt: inDays(1) }] }, /reviewAddresses\/0\/codeSha256/, 'the code itself instead of its hash')
})

t.test('email-otp keys review: a random code printed once, only its hash in the file, and it verifies', async (t) => {
  const { path, keys } = writeTenants(t)
  const printed: string[] = []
  await run(['review', '--tenant', 'acme', '--address', 'store-review@acme.test', '--days', '14', '--file', path], { out: (line) => { printed.push(line) }, note: () => {}, env: {} })
  const [code] = printed
  t.match(code, /^\d{6}$/, 'stdout: the code alone')
  const file = JSON.parse(readFileSync(path, 'utf8')) as { tenants: Array<{ reviewAddresses?: Array<{ address: string, codeSha256: string, expiresAt: string }> }> }
  const entry = file.tenants[0]?.reviewAddresses?.[0]
  t.equal(entry?.codeSha256, sha256(code ?? ''), 'the file keeps its SHA-256')
  t.notMatch(readFileSync(path, 'utf8'), new RegExp(`"${code ?? ''}"`), 'never the code')
  t.ok(Math.abs(Date.parse(entry?.expiresAt ?? '') - (Date.now() + 14 * 86_400_000)) < 60_000, 'valid --days')
  await t.rejects(run(['review', '--tenant', 'acme', '--address', 'x@acme.test', '--days', '91', '--file', path], { out: () => {}, note: () => {}, env: {} }), /--days must be a whole number from 1 to 90/)

  const { app, mail } = await buildApp(t, { TENANTS_FILE: path })
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'store-review@acme.test' } })
  t.equal(mail.count, 0)
  t.equal((await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: sent.json().data.requestId, userGuess: code } })).statusCode, 200)
})

/**
 * A page's dispatch to the review address sends nothing: it must still answer after a send's
 * time (the relay takes ACCEPT_DELAY_MS to accept), or anyone typing addresses into the page
 * spots the review address by its quick answer.
 */
const ACCEPT_DELAY_MS = 300
t.test('a page\'s dispatch to the review address answers after a send\'s time, as any other', async (t) => {
  const relay = await startSmtp(t, {
    onData (stream, _session, callback) {
      stream.resume()
      stream.on('end', () => { setTimeout(callback, ACCEPT_DELAY_MS) })
    }
  })
  const { path, keys } = writeTenants(t, (file: TenantsFile) => {
    file.tenants[0]!.reviewAddresses = [{ address: 'reviewer@acme.test', codeSha256: sha256(CODE), expiresAt: inDays(30) }]
  })
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${relay.port}?tls=off`, MAIL_FROM: 'codes@otp.test' })
  const port = await listenApp(app)
  const call = async (key: string, email: string, localAddress: string): Promise<{ status: number, ms: number }> => {
    const started = performance.now()
    const answer = await send({ port, localAddress, path: '/otp/request', headers: { 'content-type': 'application/json', ...bearer(key), ...(key === keys.acmeBrowser ? { origin: 'https://app.acme.test' } : {}) }, body: JSON.stringify({ email }) })
    return { status: answer.status, ms: performance.now() - started }
  }
  for (const [i, source] of ['127.0.11.1', '127.0.11.2', '127.0.11.3'].entries()) {
    t.equal((await call(keys.acmeLive, `user${i}@example.com`, source)).status, 200, 'the tenant\'s backend sends, accepted')
  }
  const review = await call(keys.acmeBrowser, 'reviewer@acme.test', '127.0.11.4')
  t.equal(review.status, 200)
  t.ok(review.ms >= ACCEPT_DELAY_MS, `answered after a send's time (${review.ms.toFixed(0)} ms)`)
})
