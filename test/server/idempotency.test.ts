/*
 * An Idempotency-Key's dispatch runs at most once in its window, whatever fails in between:
 * two instances as real processes on one redis-server, a real SMTP server that counts the mail
 * and makes Redis fail for the first instance at the moment it accepts a message, and the
 * tenant's charges read back from GET /usage.
 */
import t from 'tap'
import { TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { startRelay } from '../support/lossy-proxy.js'
import { startSmtp } from '../support/mail-peers.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
import { startServer, type Running } from '../support/service-process.js'
import { attemptUntil, until } from '../support/wait.js'

interface Answer { status: number, body: any, replayed: string | null, retryAfter: string | null }

t.test('a dispatch whose answer could not be recorded is never run again with its key: no second mail, no second charge', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const admin = await connectFailFast(redis.url)
  t.teardown(() => { admin.disconnect() })
  // Instance A reaches Redis through a relay the test can cut; B directly.
  const relay = await startRelay(t, redis.port)

  const refuseOnce = new Set<string>()
  const whenAccepted = new Map<string, () => void>()
  const delivered: string[] = []
  const smtp = await startSmtp(t, {
    onData (stream, session, callback) {
      stream.resume()
      stream.on('end', () => {
        const to = session.envelope.rcptTo.map((recipient) => recipient.address).join(',')
        if (refuseOnce.delete(to)) {
          callback(Object.assign(new Error('Mailbox unavailable'), { responseCode: 550 }))
          return
        }
        delivered.push(to)
        whenAccepted.get(to)?.()
        callback()
      })
    }
  })

  const { path, keys } = writeTenants(t)
  const env = {
    TENANTS_FILE: path,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    LOG_LEVEL: 'warn',
    MAIL_TRANSPORT: 'smtp',
    SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`,
    MAIL_FROM: 'codes@otp.test',
    // Generous: only the frozen Redis may make a request wait it out, never a busy machine.
    REDIS_COMMAND_TIMEOUT_MS: '2000'
  }
  const [a, b] = await Promise.all([
    startServer(t, { ...env, REDIS_URL: `redis://127.0.0.1:${relay.port}` }),
    startServer(t, { ...env, REDIS_URL: redis.url })
  ])
  const dispatch = async (instance: Running, idempotencyKey: string, email: string): Promise<Answer> => {
    const response = await fetch(`${instance.base}/otp/request`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keys.acmeLive}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify({ email })
    })
    return { status: response.status, body: await response.json(), replayed: response.headers.get('idempotent-replayed'), retryAfter: response.headers.get('retry-after') }
  }
  const charged = async (): Promise<number> => {
    const response = await fetch(`${b.base}/usage`, { headers: { authorization: `Bearer ${keys.acmeLive}` } })
    return ((await response.json()) as { data: { live: { used: number } } }).data.live.used
  }
  const mailsTo = (email: string): number => delivered.filter((to) => to === email).length

  await t.test('the provider refused the message: nothing left, so the same key really runs again', async (t) => {
    refuseOnce.add('refused@example.com')
    const chargedBefore = await charged()
    const first = await dispatch(a, 'order-refused', 'refused@example.com')
    t.same([first.status, first.body.code], [502, 'DELIVERY_FAILED'], 'the first answer: nothing left, nothing charged')
    const retried = await dispatch(b, 'order-refused', 'refused@example.com')
    t.same([retried.status, retried.replayed], [200, null], 'the retry sends the code')
    t.equal(mailsTo('refused@example.com'), 1, 'one mail left')
    t.equal(await charged() - chargedBefore, 1, 'one charge')
  })

  await t.test('Redis froze as the provider accepted: the answer is recorded once Redis runs it, and replayed', async (t) => {
    whenAccepted.set('frozen@example.com', () => { redis.freeze() })
    let thawed = false
    t.teardown(() => { if (!thawed) redis.thaw() })
    const chargedBefore = await charged()
    const logged = a.output().length
    const first = await dispatch(a, 'order-frozen', 'frozen@example.com')
    t.equal(first.status, 200, 'the first answer: the mail left')
    await a.waitFor(/could not record the idempotent answer/, logged)
    redis.thaw()
    thawed = true
    const retries = await attemptUntil('the retry on B to be answered', async () => await dispatch(b, 'order-frozen', 'frozen@example.com'), (answer) => answer.status !== 409)
    t.strictSame(retries.slice(0, -1).map((answer) => answer.body.code).filter((code) => code !== 'IDEMPOTENCY_IN_FLIGHT'), [], 'until A\'s record landed, B heard it was in flight')
    const replay = retries.at(-1)
    t.same([replay?.status, replay?.body.data?.requestId, replay?.replayed], [200, first.body.data.requestId, 'true'], 'then the first answer')
    t.equal(mailsTo('frozen@example.com'), 1, 'one mail')
    t.equal(await charged() - chargedBefore, 1, 'one charge')
  })

  await t.test('A lost Redis as the provider accepted: its answer is never recorded, and the key never runs again', async (t) => {
    whenAccepted.set('cut@example.com', () => { relay.cut() })
    const chargedBefore = await charged()
    const logged = a.output().length
    const first = await dispatch(a, 'order-cut', 'cut@example.com')
    t.equal(first.status, 200, 'the first answer: the mail left')
    await a.waitFor(/could not record the idempotent answer/, logged)

    const now = await dispatch(b, 'order-cut', 'cut@example.com')
    t.same([now.status, now.body.code, now.retryAfter], [409, 'IDEMPOTENCY_IN_FLIGHT', '1'], 'a retry at once hears it is in flight')

    // The claim's lifetime (60 s) passed, on Redis's clock.
    const [lock] = await admin.keys('idem:*:l:order-cut')
    t.ok(lock !== undefined, 'the claim is held')
    await admin.pexpire(lock ?? '', 1)
    await until('the claim to lapse', async () => await admin.exists(lock ?? '') === 0)
    const later = await dispatch(b, 'order-cut', 'cut@example.com')
    t.same([later.status, later.body.code, later.retryAfter], [409, 'IDEMPOTENCY_OUTCOME_UNKNOWN', null], 'after it, the outcome is unknown and the key does not run')
    t.equal(mailsTo('cut@example.com'), 1, 'one mail')
    t.equal(await charged() - chargedBefore, 1, 'one charge')
  })

  t.same(delivered.sort(), ['cut@example.com', 'frozen@example.com', 'refused@example.com'], 'no other mail left')
  t.equal(await charged(), 3, 'the tenant is charged for exactly the mail that left')
})
