import t from 'tap'
import { createServer } from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { createClient, EmailOtpError, parseRetryAfter, type Fetch } from '../../clients/typescript/src/index.js'
import { DEMO_RESTRICTED_KEY, DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { TEST_HMAC_KEYS } from '../helper.js'
import { startLossyProxy } from '../support/lossy-proxy.js'
import { freePort, redisTestOptions, startRedis } from '../support/redis.js'
import { sandboxCode, sandboxMessages, wrongGuess } from '../support/sandbox.js'
import { startServer, type Running } from '../support/service-process.js'
import { until } from '../support/wait.js'

/**
 * The TypeScript client against the real service, run as a process on the embedded default
 * (the demo tenant and its documented sandbox keys) or on a real redis-server.
 */

let demo: Promise<Running> | undefined
/**
 * One service process on the embedded default for the tests that need nothing else (each has
 * recipients of its own): a start costs seconds on a busy 2-core machine. Killed when the file ends.
 */
async function demoService (): Promise<Running> {
  demo ??= startServer(t, {})
  return await demo
}

let addresses = 0
/** A recipient of its own per test, so that no test meets another's limits or messages. */
function recipient (): string {
  addresses += 1
  return `client-${process.pid}-${addresses}@example.com`
}

/** Rejects with an EmailOtpError: the error, for its fields to be checked. */
async function rejection (promise: Promise<unknown>): Promise<EmailOtpError> {
  try {
    await promise
  } catch (error) {
    if (error instanceof EmailOtpError) return error
    throw error
  }
  throw new Error('expected an EmailOtpError, got an answer')
}

interface Seen { status: number | 'network error', headers: Headers }

/**
 * The global fetch, recording what each attempt sent and got, with a hook run on each answer
 * before the client sees it (to restart a peer at the moment the service answered 503).
 */
function observedFetch (onAnswer?: (response: Response) => Promise<void>, extraHeaders: Record<string, string> = {}): { fetch: Fetch, seen: Seen[] } {
  const seen: Seen[] = []
  return {
    seen,
    fetch: async (url, init) => {
      const headers = new Headers(init.headers)
      for (const [name, value] of Object.entries(extraHeaders)) headers.set(name, value)
      try {
        const response = await fetch(url, { ...init, headers })
        seen.push({ status: response.status, headers })
        await onAnswer?.(response)
        return response
      } catch (error) {
        seen.push({ status: 'network error', headers })
        throw error
      }
    }
  }
}

t.test('dispatch and verify with the demo sandbox key', async (t) => {
  const service = await demoService()
  const client = createClient({ baseUrl: service.base + '/', apiKey: DEMO_SANDBOX_KEY })
  const email = recipient()

  const sent = await client.dispatch(email, { locale: 'fr' })
  t.match(sent.requestId, /^otp_[A-Za-z0-9_-]{22}$/, 'a requestId')
  t.match(sent.idempotencyKey, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, 'a generated UUID as Idempotency-Key')
  t.equal(sent.replayed, false)
  t.type(sent.message, 'string')
  const [message] = await sandboxMessages(service.base, DEMO_SANDBOX_KEY, email)
  t.equal(message?.requestId, sent.requestId, 'the mail is in the sandbox inbox')
  t.match(message?.subject, /code/i)

  const again = await client.dispatch(email, { locale: 'fr', idempotencyKey: sent.idempotencyKey })
  t.same([again.requestId, again.replayed], [sent.requestId, true], 'the same key replays the first answer')
  t.equal((await sandboxMessages(service.base, DEMO_SANDBOX_KEY, email)).length, 1, 'and sends no second mail')

  const code = await sandboxCode(service.base, DEMO_SANDBOX_KEY, email, sent.requestId)
  const verified = await client.verify(sent.requestId, ` ${code} `)
  t.match(verified.receipt, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, 'a signed receipt')
  t.type(verified.message, 'string')

  const used = await rejection(client.verify(sent.requestId, code))
  t.equal(used.code, 'CODE_MISMATCH', 'a code verifies once')
})

t.test('errors carry the stable code, status, message, requestId and trace id', async (t) => {
  const service = await demoService()
  const client = createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY })
  const email = recipient()
  const { requestId } = await client.dispatch(email)
  const code = await sandboxCode(service.base, DEMO_SANDBOX_KEY, email, requestId)

  const wrong = await rejection(client.verify(requestId, wrongGuess(code)))
  t.ok(wrong instanceof Error)
  t.equal(wrong.name, 'EmailOtpError')
  t.same({ code: wrong.code, status: wrong.status, requestId: wrong.requestId, retryAfter: wrong.retryAfter, attempts: wrong.attempts },
    { code: 'CODE_MISMATCH', status: 400, requestId, retryAfter: undefined, attempts: 1 })
  t.equal(wrong.message, 'The code is incorrect, expired or already used')
  t.match(wrong.traceId, /\S/, 'the X-Request-Id of the answer')

  const malformed = await rejection(client.verify((await client.dispatch(email)).requestId, '12ab'))
  t.same([malformed.code, malformed.status], ['INVALID_CODE_FORMAT', 400])

  const invalid = await rejection(client.dispatch('not an address'))
  t.same({ code: invalid.code, status: invalid.status, requestId: invalid.requestId }, { code: 'INVALID_EMAIL', status: 400, requestId: undefined })
  t.match(invalid.message, /\S/)

  const badIp = await rejection(client.dispatch(recipient(), { endUserIp: 'somewhere' }))
  t.same([badIp.code, badIp.status], ['INVALID_END_USER_IP', 400], 'End-User-IP is sent')

  const unknownKey = createClient({ baseUrl: service.base, apiKey: 'sk_test_NoSuchKey' })
  const unauthorized = await rejection(unknownKey.dispatch(recipient()))
  t.same([unauthorized.code, unauthorized.status, unauthorized.attempts], ['UNAUTHORIZED', 401, 1])
})

t.test('429 carries retryAfter and is not retried', async (t) => {
  const service = await startServer(t, { RATE_LIMIT_RECIPIENT: '1/15m' })
  const observed = observedFetch()
  const client = createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY, fetch: observed.fetch, retries: 3 })
  const email = recipient()
  await client.dispatch(email)
  const limited = await rejection(client.dispatch(email))
  t.same([limited.code, limited.status, limited.attempts], ['RATE_LIMITED', 429, 1])
  t.ok(limited.retryAfter !== undefined && limited.retryAfter > 0 && limited.retryAfter <= 900, `retryAfter in seconds (${String(limited.retryAfter)})`)
  t.equal(observed.seen.length, 2, 'two requests in all')
})

t.test('503 from a Redis outage: dispatch and verify retried with the same Idempotency-Key until Redis is back', redisTestOptions(), async (t) => {
  // Appended and synced on every write, so that a restarted server still holds the code.
  const redis = await startRedis(['--appendonly', 'yes', '--appendfsync', 'always', '--dir', t.testdir({})])
  t.teardown(async () => { await redis.stop() })
  const service = await startServer(t, { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  await until('the service to be ready', async () => (await fetch(`${service.base}/readyz`)).status === 200)
  const email = recipient()
  const pending = await createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY }).dispatch(email)
  const code = await sandboxCode(service.base, DEMO_SANDBOX_KEY, email, pending.requestId)

  // Redis comes back once the service has answered 503: the retries must carry on until then.
  const restartOnFirst503 = async (response: Response): Promise<void> => {
    if (response.status === 503 && !restarted) {
      restarted = true
      await redis.start()
    }
  }
  let restarted = false
  const observed = observedFetch(restartOnFirst503)
  const client = createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY, fetch: observed.fetch, retries: 10 })

  await redis.stop()
  const sent = await client.dispatch(email, { idempotencyKey: 'signup-attempt-1' })
  t.equal(observed.seen[0]?.status, 503, 'the first attempt met the outage')
  t.equal(observed.seen.at(-1)?.status, 200, 'a retry got through')
  t.same(observed.seen.map((attempt) => attempt.headers.get('idempotency-key')), observed.seen.map(() => 'signup-attempt-1'), 'every attempt carried the same Idempotency-Key')
  t.equal(sent.idempotencyKey, 'signup-attempt-1')
  t.match(sent.requestId, /^otp_/)

  await redis.stop()
  restarted = false
  observed.seen.length = 0
  const verified = await client.verify(pending.requestId, code)
  t.equal(observed.seen[0]?.status, 503, 'the first verify met the outage')
  t.ok(observed.seen.length >= 2, `verify retried (${observed.seen.length} attempts)`)
  t.match(verified.receipt, /\./, 'and the code, untouched by the 503, verified')

  await redis.stop()
  const once = createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY, retries: 1 })
  const unavailable = await rejection(once.dispatch(recipient()))
  t.same({ code: unavailable.code, status: unavailable.status, retryAfter: unavailable.retryAfter, attempts: unavailable.attempts },
    { code: 'UNAVAILABLE', status: 503, retryAfter: 1, attempts: 2 }, 'retries are bounded')
})

t.test('a lost answer: dispatch is retried and replayed, verify is not retried', async (t) => {
  const service = await demoService()
  const email = recipient()

  const dispatchProxy = await startLossyProxy(t, service.base)
  const sent = await createClient({ baseUrl: dispatchProxy.base, apiKey: DEMO_SANDBOX_KEY }).dispatch(email)
  t.equal(dispatchProxy.connections, 2, 'the answer of the first connection was lost, a second one was made')
  t.equal(sent.replayed, true, 'the retry got the stored answer of the first attempt')
  const messages = await sandboxMessages(service.base, DEMO_SANDBOX_KEY, email)
  t.same(messages.map((message) => message.requestId), [sent.requestId], 'one mail, for the requestId returned')

  const verifyProxy = await startLossyProxy(t, service.base)
  const code = await sandboxCode(service.base, DEMO_SANDBOX_KEY, email, sent.requestId)
  const lost = await rejection(createClient({ baseUrl: verifyProxy.base, apiKey: DEMO_SANDBOX_KEY }).verify(sent.requestId, code))
  t.same({ code: lost.code, status: lost.status, attempts: lost.attempts, requestId: lost.requestId },
    { code: 'NETWORK_ERROR', status: 0, attempts: 1, requestId: sent.requestId })
  t.equal(verifyProxy.connections, 1, 'verify was not repeated')
  const direct = await rejection(createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY }).verify(sent.requestId, code))
  t.equal(direct.code, 'CODE_MISMATCH', 'the lost attempt had used the code: a retry would have answered a right guess with CODE_MISMATCH')
})

t.test('nothing listening: NETWORK_ERROR after the retries of dispatch, at once for verify', async (t) => {
  const port = await freePort()
  const client = createClient({ baseUrl: `http://127.0.0.1:${port}`, apiKey: DEMO_SANDBOX_KEY, retries: 2 })
  const dispatch = await rejection(client.dispatch(recipient()))
  t.same([dispatch.code, dispatch.status, dispatch.attempts], ['NETWORK_ERROR', 0, 3])
  t.match(dispatch.message, /could not be reached/)
  t.ok(dispatch.cause !== undefined, 'the underlying error is kept as cause')
  const verify = await rejection(client.verify('otp_x', '123456'))
  t.same([verify.code, verify.attempts], ['NETWORK_ERROR', 1])
})

t.test('an answer that is not the service\'s: UNEXPECTED_RESPONSE; a 503 retried unless Retry-After is past the cap', async (t) => {
  const keys: Array<string | undefined> = []
  const answer: { retryAfter?: string } = {}
  const server = createServer((request, response) => {
    keys.push(request.headers['idempotency-key'] as string | undefined)
    request.resume()
    response.writeHead(503, { 'content-type': 'text/html', ...(answer.retryAfter === undefined ? {} : { 'retry-after': answer.retryAfter }) })
    response.end('<html>Service Unavailable</html>')
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const client = createClient({ baseUrl: base, apiKey: DEMO_SANDBOX_KEY, retries: 2, maxRetryDelayMs: 5000 })

  const gateway = await rejection(client.dispatch(recipient()))
  t.same({ code: gateway.code, status: gateway.status, attempts: gateway.attempts }, { code: 'UNEXPECTED_RESPONSE', status: 503, attempts: 3 })
  t.equal(new Set(keys).size, 1, 'one Idempotency-Key for the three attempts')

  answer.retryAfter = '30'
  const later = await rejection(client.dispatch(recipient()))
  t.same({ status: later.status, retryAfter: later.retryAfter, attempts: later.attempts }, { status: 503, retryAfter: 30, attempts: 1 }, 'not waited out: the caller gets retryAfter')
})

t.test('a restricted key works from an allowed Origin only', async (t) => {
  const service = await demoService()
  const page = (origin: string | null): ReturnType<typeof createClient> => createClient({
    baseUrl: service.base,
    apiKey: DEMO_RESTRICTED_KEY,
    ...(origin === null ? {} : { fetch: observedFetch(undefined, { origin }).fetch })
  })
  const email = recipient()
  const sent = await page('http://localhost:5173').dispatch(email)
  const code = await sandboxCode(service.base, DEMO_SANDBOX_KEY, email, sent.requestId)
  t.match((await page('http://127.0.0.1:8080').verify(sent.requestId, code)).receipt, /\./, 'dispatch and verify from allowed origins')

  for (const [origin, why] of [['https://evil.example', 'another origin'], [null, 'no Origin']] as const) {
    const refused = await rejection(page(origin).dispatch(recipient()))
    t.same([refused.code, refused.status], ['ORIGIN_NOT_ALLOWED', 403], why)
  }
  const withIp = await rejection(page('http://localhost:5173').dispatch(recipient(), { endUserIp: '203.0.113.9' }))
  t.same([withIp.code, withIp.status], ['END_USER_IP_NOT_ALLOWED', 400], 'End-User-IP is for secret keys')

  const leaked = createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY, fetch: observedFetch(undefined, { origin: 'http://localhost:5173' }).fetch })
  const secret = await rejection(leaked.dispatch(recipient()))
  t.same([secret.code, secret.status], ['SECRET_KEY_IN_BROWSER', 403])
})

t.test('Captcha-Token and End-User-IP are sent as headers when given', async (t) => {
  const service = await demoService()
  const observed = observedFetch()
  const client = createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY, fetch: observed.fetch })
  const sent = await client.dispatch(recipient(), { captchaToken: 'widget-token', endUserIp: '198.51.100.7' })
  t.match(sent.requestId, /^otp_/)
  const headers = observed.seen[0]?.headers
  t.same([headers?.get('captcha-token'), headers?.get('end-user-ip'), headers?.get('authorization')], ['widget-token', '198.51.100.7', `Bearer ${DEMO_SANDBOX_KEY}`])
  await rejection(client.verify(sent.requestId, '000000', { endUserIp: '198.51.100.7' }))
  t.equal(observed.seen[1]?.headers.get('end-user-ip'), '198.51.100.7')
  t.equal(observed.seen[1]?.headers.get('captcha-token'), null)
})

t.test('createClient refuses missing options; Retry-After is read as seconds or a date', async (t) => {
  t.throws(() => createClient({ baseUrl: '', apiKey: 'k' }), TypeError)
  t.throws(() => createClient({ baseUrl: 'http://x', apiKey: '' }), TypeError)
  t.equal(parseRetryAfter('120'), 120)
  t.equal(parseRetryAfter(null), undefined)
  t.equal(parseRetryAfter('soon'), undefined)
  t.equal(parseRetryAfter(new Date(Date.now() - 60_000).toUTCString()), 0, 'a date in the past: now')
  const inAMinute = parseRetryAfter(new Date(Date.now() + 60_000).toUTCString())
  t.ok(inAMinute !== undefined && inAMinute > 50 && inAMinute <= 61, `a date: seconds until it (${String(inAMinute)})`)
})
