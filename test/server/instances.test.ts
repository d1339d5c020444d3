import { once } from 'node:events'
import t from 'tap'
import { Redis } from 'ioredis'
import { writeTenants, TEST_HMAC_KEYS } from '../helper.js'
import { startSmtp } from '../support/mail-peers.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { post, startServer } from '../support/service-process.js'

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

t.test('SIGTERM under load: in-flight requests finish, exit 0, no code without its mail', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  // An SMTP server that takes its time, so requests are in flight when the signal comes.
  let delivered = 0
  const smtp = await startSmtp(t, {
    onData (stream, _session, callback) {
      stream.resume()
      stream.on('end', () => {
        setTimeout(() => {
          delivered++
          callback()
        }, 700)
      })
    }
  })
  const { path, keys } = writeTenants(t)
  const server = await startServer(t, {
    TENANTS_FILE: path,
    REDIS_URL: redis.url,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    LOG_LEVEL: 'warn',
    MAIL_TRANSPORT: 'smtp',
    SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`,
    MAIL_FROM: 'codes@otp.test',
    SHUTDOWN_GRACE_MS: '10000'
  })
  const inFlight = Array.from({ length: 20 }, async (_, i) => await post(server.base, '/otp/request', keys.acmeLive, { email: `drain${i}@example.com` }).catch(() => ({ status: 0, body: null })))
  await new Promise((resolve) => setTimeout(resolve, 300))
  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  const answers = await Promise.all(inFlight)
  const [exitCode] = await exited
  t.equal(exitCode, 0, 'exits cleanly')
  const statuses = answers.map((answer) => answer.status)
  t.ok(statuses.filter((status) => status === 200).length >= 1, 'in-flight requests completed')
  t.ok(statuses.every((status) => status === 200 || status === 503 || status === 0), `no error answers: ${statuses.join(',')}`)
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  const tokens = await client.keys('otp:*')
  t.equal(tokens.length, statuses.filter((status) => status === 200).length, 'every stored code answered 200')
  t.equal(delivered, tokens.length, 'and every stored code has its mail')
})
