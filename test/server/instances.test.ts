import { once } from 'node:events'
import t from 'tap'
import { Redis } from 'ioredis'
import { writeTenants, TEST_HMAC_KEYS } from '../helper.js'
import { startSmtp } from '../support/mail-peers.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { post, startServer } from '../support/service-process.js'
import { until } from '../support/wait.js'

// 108 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('three processes on one Redis behave as one service', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t, (file) => { file.tiers.standard = { allowance: 1000, window: '1d', sandboxAllowance: 4 } })
  const env = { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, LOG_LEVEL: 'warn', RATE_LIMIT_RECIPIENT: '3/15m' }
  const [a, b, c] = await Promise.all([startServer(t, env), startServer(t, env), startServer(t, env)])
  if (a === undefined || b === undefined || c === undefined) throw new Error('not started')

  const sent = await post(a.base, '/otp/request', keys.acmeTest, { email: 'tri@example.com' })
  t.equal(sent.status, 200, 'dispatch on A')
  const inbox = await fetch(`${c.base}/sandbox/messages?email=tri@example.com`, { headers: { authorization: `Bearer ${keys.acmeTest}` } })
  const [message] = ((await inbox.json()) as { data: { messages: Array<{ code: string, requestId: string }> } }).data.messages
  t.equal(message?.requestId, sent.body.data.requestId, 'the sandbox inbox is shared')
  t.equal((await post(b.base, '/otp/verify', keys.acmeTest, { requestId: sent.body.data.requestId, userGuess: message?.code })).status, 200, 'verify on B')
  t.equal((await post(c.base, '/otp/verify', keys.acmeTest, { requestId: sent.body.data.requestId, userGuess: message?.code })).status, 400, 'replay on C fails')

  t.equal((await post(b.base, '/otp/request', keys.acmeTest, { email: 'tri@example.com' })).status, 200)
  t.equal((await post(c.base, '/otp/request', keys.acmeTest, { email: 'TRI@example.com' })).status, 200)
  const limited = await post(a.base, '/otp/request', keys.acmeTest, { email: 'tri@example.com' })
  t.equal(limited.status, 429, 'the recipient limit is shared: the fourth dispatch, on A, is refused')

  t.equal((await post(b.base, '/otp/request', keys.acmeTest, { email: 'other@example.com' })).status, 200, 'the fourth unit of the sandbox allowance')
  const broke = await post(c.base, '/otp/request', keys.acmeTest, { email: 'another@example.com' })
  t.same([broke.status, broke.body.code], [402, 'QUOTA_EXCEEDED'], 'the allowance is shared')
})

t.test('SIGTERM under load: every request in flight is answered, exit 0, no code without its mail', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  // The SMTP server holds every message until the shutdown has begun, so the requests are
  // demonstrably in flight when the signal comes and finish only while the service drains.
  let shuttingDown = false
  const held: Array<() => void> = []
  let delivered = 0
  const smtp = await startSmtp(t, {
    onData (stream, _session, callback) {
      stream.resume()
      stream.on('end', () => {
        const accept = (): void => {
          delivered++
          callback()
        }
        if (shuttingDown) accept()
        else held.push(accept)
      })
    }
  })
  const { path, keys } = writeTenants(t)
  const server = await startServer(t, {
    TENANTS_FILE: path,
    REDIS_URL: redis.url,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    LOG_LEVEL: 'info',
    MAIL_TRANSPORT: 'smtp',
    SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`,
    MAIL_FROM: 'codes@otp.test',
    SHUTDOWN_GRACE_MS: '10000'
  })
  const requests = 20
  const inFlight = Array.from({ length: requests }, async (_, i) => await post(server.base, '/otp/request', keys.acmeLive, { email: `drain${i}@example.com` }))
  // A code is stored before its mail is sent: 20 stored codes are 20 requests received in
  // full and waiting on the mail server (at most 5 of them at it, the rest in the pool's queue).
  await until('every request to reach the mailer', async () => (await client.keys('otp:*')).length === requests)
  const logged = server.output().length
  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  await server.waitFor(/shutting down: closing the listeners/, logged)
  shuttingDown = true
  for (const accept of held.splice(0)) accept()

  const answers = await Promise.all(inFlight)
  const [exitCode] = await exited
  t.equal(exitCode, 0, 'exits cleanly')
  t.same(answers.map((answer) => answer.status), Array(requests).fill(200), 'every request in flight was answered 200, none refused or reset')
  t.equal((await client.keys('otp:*')).length, requests, 'every answered code is stored')
  t.equal(delivered, requests, 'and every stored code has its mail')
})
