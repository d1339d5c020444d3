import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import { bearer, buildApp, storeEnv, TEST_HMAC_KEYS, TEST_METRICS_TOKEN, writeTenants, type FixtureKeys } from '../helper.js'
import { playHost } from '../support/https-hosts.js'
import { SNS_CERT, SNS_CERT_PATH, SNS_TOPIC, signedFeedback } from '../support/sns.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { startSmtp } from '../support/mail-peers.js'
import { attemptUntil, until } from '../support/wait.js'
import type { TenantsFile } from '../../schemas/tenants.js'

const HOUR = 3_600_000
const DAY = 86_400_000

interface Harness {
  app: FastifyInstance
  keys: FixtureKeys
  dispatch: (email: string, key?: string) => Promise<{ statusCode: number, requestId: string | undefined }>
  verify: (requestId: string, guess: string, key?: string) => Promise<number>
  /** GET /insights once every event and refusal so far is written. */
  insights: (query?: string, key?: string, headers?: Record<string, string>) => Promise<{ statusCode: number, body: any }>
  code: (email: string) => string
}

async function harness (t: Test, store: 'memory' | 'redis', env: Record<string, string> = {}, tenants?: (file: TenantsFile) => void): Promise<Harness> {
  const { path, keys } = writeTenants(t, tenants)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path, ...await storeEnv(t, store), ...env })
  return {
    app,
    keys,
    code: (email) => mail.codeFor(email),
    async dispatch (email, key = keys.acmeLive) {
      const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })
      return { statusCode: answer.statusCode, requestId: answer.json().data?.requestId }
    },
    async verify (requestId, userGuess, key = keys.acmeLive) {
      return (await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(key), payload: { requestId, userGuess } })).statusCode
    },
    async insights (query = '', key = keys.acmeLive, headers = {}) {
      await app.state.verificationLog.flush()
      await app.state.insights.flush()
      const answer = await app.inject({ method: 'GET', url: `/insights${query}`, headers: { ...bearer(key), ...headers } })
      return { statusCode: answer.statusCode, body: answer.json() }
    }
  }
}

const wrongFor = (code: string): string => code === '000000' ? '111111' : '000000'

/** The bucket of the hour now is in (the dispatches of the test were requested in it, or the one before at an hour's turn). */
function thisHour (body: any): any {
  const start = new Date(Math.floor(Date.now() / HOUR) * HOUR).toISOString()
  return body.data.buckets.find((bucket: { start: string }) => bucket.start === start)
}

const ZERO_FAILURES = { timeout: 0, connection: 0, throttled: 0, provider: 0, rejected: 0, unavailable: 0, unknown: 0, suppressed: 0, sending_paused: 0 }
const ZERO_FUNNEL = {
  requested: 0,
  sent: 0,
  deliveryFailed: ZERO_FAILURES,
  delivered: 0,
  bounced: { permanent: 0, transient: 0 },
  complained: 0,
  verified: 0,
  wrongGuesses: 0,
  locked: 0,
  receiptsRedeemed: 0,
  refused: { 402: 0, 403: 0, 429: 0 },
  conversion: null,
  timeToVerify: null,
  timeToDelivery: null
}

for (const store of ['memory', 'redis'] as const) {
  t.test(`GET /insights (${store})`, store === 'redis' ? redisTestOptions() : {}, async (t) => {
    t.test('a dispatch, a wrong guess, a verification and its receipt, a 429: the funnel of the hour and the day', async (t) => {
      const h = await harness(t, store, { RATE_LIMIT_RECIPIENT: '1/15m', LOCKOUT_THRESHOLD: '1' })
      const before = Date.now()
      const ada = await h.dispatch('ada@example.com')
      t.equal(await h.verify(ada.requestId as string, wrongFor(h.code('ada@example.com'))), 400, 'a wrong guess (that locks the mailbox)')
      const bo = await h.dispatch('bo@example.com')
      const verified = await h.app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(h.keys.acmeLive), payload: { requestId: bo.requestId, userGuess: h.code('bo@example.com') } })
      t.equal(verified.statusCode, 200)
      const redeemed = await h.app.inject({ method: 'POST', url: '/otp/receipts/redeem', headers: bearer(h.keys.acmeLive), payload: { receipt: verified.json().data.receipt, email: 'bo@example.com' } })
      t.equal(redeemed.statusCode, 200)
      t.equal((await h.dispatch('bo@example.com')).statusCode, 429, 'the recipient limit')
      t.equal(await h.verify('otp_neverIssuedToAnybody000', '123456'), 400, 'a guess at a requestId never issued')

      const hourly = await h.insights('?granularity=hour')
      t.equal(hourly.statusCode, 200)
      t.match(hourly.body.data, { granularity: 'hour' })
      t.equal(hourly.body.data.buckets.length, 25, 'the last 24 hours, aligned down to the hour: 25 buckets')
      const expected = {
        ...ZERO_FUNNEL,
        requested: 2,
        sent: 2,
        verified: 1,
        wrongGuesses: 1,
        locked: 1,
        receiptsRedeemed: 1,
        refused: { 402: 0, 403: 0, 429: 1 },
        conversion: 0.5
      }
      // How long the verify took depends on the machine: only that it was timed, and p50 ≤ p90.
      const timed = ({ timeToVerify, ...funnel }: any): any => {
        t.equal(timeToVerify?.count, 1, 'one verification timed')
        t.ok(timeToVerify.p50 > 0 && timeToVerify.p50 <= timeToVerify.p90, 'p50 and p90 estimated from the bins')
        return funnel
      }
      const untimed: Record<string, unknown> = { ...expected }
      delete untimed.timeToVerify
      const bucket = Math.floor(before / HOUR) === Math.floor(Date.now() / HOUR) ? thisHour(hourly.body) : null
      if (bucket !== null) t.strictSame(timed(bucket), { start: bucket.start, ...untimed }, 'the hour the test ran in')
      t.strictSame(timed(hourly.body.data.totals), untimed, 'the totals')
      const daily = await h.insights()
      t.equal(daily.body.data.granularity, 'day', 'by the day by default')
      t.equal(daily.body.data.buckets.length, 31, 'the last 30 days, aligned down to the day')
      t.strictSame(timed(daily.body.data.totals), untimed, 'the same totals')
      t.strictSame(daily.body.data.buckets.slice(0, -2).map(({ start: _start, ...funnel }: any) => funnel), Array(29).fill(ZERO_FUNNEL), 'every bucket present, zeros included')

      t.strictSame((await h.insights('', h.keys.globexTest)).body.data.totals, ZERO_FUNNEL, 'another tenant sees zeros')
      t.strictSame((await h.insights('', h.keys.acmeTest)).body.data.totals, ZERO_FUNNEL, 'the sandbox keys of the tenant see their own mode')
      const browser = await h.insights('', h.keys.acmeBrowser, { origin: 'https://app.acme.test' })
      t.strictSame([browser.statusCode, browser.body.code], [403, 'KEY_NOT_PERMITTED'], "a page's key is refused")
      const metrics = await h.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
      t.match(metrics.body, /^email_otp_insights_dropped_total 0$/m, 'lost refusals are counted on /metrics')
    })

    t.test('a refusal reaches the answer within about a second, without a flush', async (t) => {
      // Polled every 10 ms: the account routes' own limit must not refuse (and count) the polls.
      const h = await harness(t, store, { RATE_LIMIT_RECIPIENT: '1/15m', RATE_LIMIT_ACCOUNT: '100000/1m' })
      await h.dispatch('cy@example.com')
      t.equal((await h.dispatch('cy@example.com')).statusCode, 429)
      await attemptUntil('the 429 in the insights', async () => {
        const answer = await h.app.inject({ method: 'GET', url: '/insights', headers: bearer(h.keys.acmeLive) })
        return answer.json().data.totals.refused['429'] as number
      }, (refused) => refused === 1)
    })

    t.test('a delivery the SMTP relay refused', async (t) => {
      const peer = await startSmtp(t, {
        onRcptTo (address, _session, callback) { callback(address.address.startsWith('gone') ? Object.assign(new Error('no such user'), { responseCode: 550 }) : undefined) }
      })
      const h = await harness(t, store, { MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${peer.port}?tls=off`, MAIL_FROM: 'Codes <codes@otp.test>' })
      t.equal((await h.dispatch('gone@example.com')).statusCode, 502)
      t.equal((await h.dispatch('here@example.com')).statusCode, 200)
      const { totals } = (await h.insights()).body.data
      t.match(totals, { requested: 2, sent: 1, deliveryFailed: { ...ZERO_FAILURES, rejected: 1 }, conversion: 0 })
    })

    t.test('SES feedback: delivered once however often SES says it, bounced by type, complained', async (t) => {
      const sns = await playHost(t, 'sns.eu-west-1.amazonaws.com', (request, response) => {
        if (request.url === SNS_CERT_PATH) response.writeHead(200).end(SNS_CERT)
        else response.writeHead(404).end()
      })
      const h = await harness(t, store, { SES_FEEDBACK_TOPIC_ARNS: SNS_TOPIC })
      const post = async (body: object): Promise<number> => (await h.app.inject({ method: 'POST', url: '/feedback/ses', headers: { 'content-type': 'text/plain; charset=UTF-8', 'x-amz-sns-message-type': 'Notification' }, payload: JSON.stringify(body) })).statusCode
      const first = (await h.dispatch('di@example.com')).requestId as string
      const second = (await h.dispatch('el@example.com')).requestId as string
      for (let i = 0; i < 2; i++) t.equal(await post(signedFeedback(sns.origin, first, 'di@example.com', 'Delivery', { delivery: { recipients: ['di@example.com'] } })), 200)
      t.equal(await post(signedFeedback(sns.origin, first, 'di@example.com', 'Complaint', { complaint: { complainedRecipients: [{ emailAddress: 'di@example.com' }] } })), 200)
      t.equal(await post(signedFeedback(sns.origin, second, 'el@example.com', 'Bounce', { bounce: { bounceType: 'Permanent', bouncedRecipients: [{ emailAddress: 'el@example.com' }] } })), 200)
      const { totals } = (await h.insights()).body.data
      t.match(totals, { requested: 2, sent: 2, delivered: 1, complained: 1, bounced: { permanent: 1, transient: 0 }, timeToDelivery: { count: 1 } })
    })

    t.test('another tenant cannot inflate the counts: its refusals are its own, a key refused at the door counts for nobody', async (t) => {
      const h = await harness(t, store, { RATE_LIMIT_RECIPIENT: '1/15m' })
      const mine = (await h.dispatch('jo@example.com')).requestId as string
      t.equal(await h.verify(mine, '123456', h.keys.globexTest), 400, "a guess at acme's requestId with globex's key")
      t.equal(await h.verify(mine, '123456', h.keys.acmeTest), 400, "and with acme's sandbox key")
      await h.dispatch('fi@example.com', h.keys.globexTest)
      t.equal((await h.dispatch('fi@example.com', h.keys.globexTest)).statusCode, 429)
      const foreignOrigin = await h.app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(h.keys.acmeBrowser), origin: 'https://evil.example' }, payload: { email: 'fi@example.com' } })
      t.equal(foreignOrigin.statusCode, 403, 'the page key from another origin')
      const restricted = await h.insights('', h.keys.acmeBrowser, { origin: 'https://app.acme.test' })
      t.equal(restricted.statusCode, 403)
      t.strictSame((await h.insights()).body.data.totals, { ...ZERO_FUNNEL, requested: 1, sent: 1, conversion: 0 }, "acme's live funnel has its dispatch and nothing of the others")
      t.match((await h.insights('', h.keys.globexTest)).body.data.totals, { requested: 1, wrongGuesses: 0, refused: { 429: 1 } }, "globex's own, and its guess at another's requestId counted nowhere")
    })

    t.test('bad ranges answer 400 with a stable code, never a 500', async (t) => {
      const h = await harness(t, store)
      const now = Date.now()
      const cases: Array<[string, string]> = [
        ['?from=yesterday', 'INSIGHTS_RANGE_INVALID'],
        ['?from=', 'INSIGHTS_RANGE_INVALID'],
        ['?to=', 'INSIGHTS_RANGE_INVALID'],
        ['?from=0000-00-00T00:00:00Z', 'INSIGHTS_RANGE_INVALID'],
        ['?from=2026-02-30T00:00:00Z', 'INSIGHTS_RANGE_INVALID'],
        ['?from=2026-01-01T24:00:00Z', 'INSIGHTS_RANGE_INVALID'],
        ['?to=%2B275760-09-13T00:00:00Z', 'INSIGHTS_RANGE_INVALID'],
        ['?to=275760-09-13T00:00:00Z', 'INSIGHTS_RANGE_INVALID'],
        ['?from=99999999999999999999', 'INSIGHTS_RANGE_INVALID'],
        ['?from=1e400', 'INSIGHTS_RANGE_INVALID'],
        ['?from=2026-01-01', 'INSIGHTS_RANGE_INVALID'],
        ['?to=9999-12-31T23:59:59Z', 'INSIGHTS_RANGE_INVALID'],
        ['?to=0001-01-01T00:00:00Z', 'INSIGHTS_RANGE_INVALID'],
        [`?from=${new Date(now).toISOString()}&to=${new Date(now - HOUR).toISOString()}`, 'INSIGHTS_RANGE_INVALID'],
        [`?from=${new Date(now).toISOString()}&to=${new Date(now).toISOString()}`, 'INSIGHTS_RANGE_INVALID'],
        [`?granularity=hour&from=${new Date(now - 8 * DAY).toISOString()}`, 'INSIGHTS_RANGE_TOO_LONG'],
        ['?from=a&from=b', 'INVALID_BODY'],
        ['?granularity=hour&granularity=day', 'INVALID_BODY'],
        ['?granularity=week', 'INVALID_BODY'],
        ['?tenant=globex', 'INVALID_BODY'],
        ['?from[]=2026-01-01T00:00:00Z', 'INVALID_BODY'],
        ['?__proto__[from]=2026-01-01T00:00:00Z', 'INVALID_BODY'],
        [`?from=${'9'.repeat(10_000)}`, 'INVALID_BODY']
      ]
      for (const [query, code] of cases) {
        const answer = await h.insights(query)
        t.strictSame([answer.statusCode, answer.body.code], [400, code], query.slice(0, 80))
      }
      t.equal((await h.insights(`?granularity=hour&from=${encodeURIComponent(new Date(now - 7 * DAY + HOUR).toISOString())}`)).statusCode, 200, 'a week of hours is within bounds')
      const day = (ms: number): string => new Date(ms).toISOString().slice(0, 10)
      t.equal((await h.insights(`?from=${day(now - 3 * DAY)}T00:00:00.123456789%2B05:30&to=${day(now - 2 * DAY)}T00:00:00z`)).statusCode, 200, 'fractions and offsets of RFC 3339')
    })

    t.test('a range reaching before retention is clamped, and says where data starts', async (t) => {
      const h = await harness(t, store, { INSIGHTS_DAYS: '2' })
      const answer = await h.insights('?from=2000-01-01T00:00:00Z')
      t.equal(answer.statusCode, 200)
      const dataStart = Math.ceil((Date.now() - 2 * DAY) / DAY) * DAY
      t.equal(answer.body.data.dataStart, new Date(dataStart).toISOString(), 'the first day that starts within INSIGHTS_DAYS')
      t.equal(answer.body.data.from, answer.body.data.dataStart, 'the range starts where data does')
      t.equal(answer.body.data.buckets.length, 2)
      const hours = await h.insights(`?granularity=hour&from=${encodeURIComponent(new Date(Date.now() - 5 * DAY).toISOString())}`)
      t.equal(hours.statusCode, 200, 'clamped before its length is measured')
      t.equal(hours.body.data.from, new Date(Math.ceil((Date.now() - 2 * DAY) / HOUR) * HOUR).toISOString())
    })
  })
}

t.test('a read of the longest range is one bounded pipeline: a HGETALL per bucket, no scan', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS, INSIGHTS_DAYS: '400' })
  // Every command Redis runs, as MONITOR reports it: those of the read are the ones naming insights keys.
  const client = new Redis(redis.url)
  const monitor = await client.monitor()
  t.teardown(() => {
    monitor.disconnect()
    client.disconnect()
  })
  const commands: string[][] = []
  monitor.on('monitor', (_time: string, args: string[]) => { commands.push(args) })
  const answer = await app.inject({ method: 'GET', url: `/insights?from=${encodeURIComponent(new Date(Date.now() - 399 * DAY).toISOString())}`, headers: bearer(keys.acmeLive) })
  t.equal(answer.statusCode, 200)
  t.equal(answer.json().data.buckets.length, 400)
  const ofInsights = (): string[][] => commands.filter((args) => args.some((arg) => arg.startsWith('insights:')))
  await until('the read to be monitored', () => ofInsights().length >= 400)
  const read = ofInsights()
  t.equal(read.length, 400, 'one command a bucket')
  t.ok(read.every(([name, key]) => name?.toLowerCase() === 'hgetall' && key?.startsWith('insights:{acme:live}:d:')), "each an HGETALL of one of the key's tenant and mode's day buckets")
  t.notOk(commands.some(([name]) => ['scan', 'keys'].includes(name?.toLowerCase() ?? '')), 'no scan')
  t.equal((await app.inject({ method: 'GET', url: `/insights?from=${encodeURIComponent(new Date(Date.now() - 400 * DAY).toISOString())}`, headers: bearer(keys.acmeLive) })).statusCode, 200, 'clamped to the 400 days kept')
})
