import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import t, { type Test } from 'tap'
import { TEST_HMAC_KEYS, writeTenants, type FixtureKeys } from '../helper.js'
import { startSesLocal, startSmtp } from '../support/mail-peers.js'
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { startServer } from '../support/service-process.js'
import { startReceiver, webhookSecret, type WebhookReceiver } from '../support/webhook-receiver.js'

const FAST_WEBHOOKS = { WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true', WEBHOOK_RETRY_BASE_MS: '100', WEBHOOK_RETRY_MAX_DELAY_MS: '400', WEBHOOK_TIMEOUT_MS: '2000' }
/** Exports every 100 ms, so the test waits for spans instead of the 5 s default. */
const FAST_EXPORT = { OTEL_BSP_SCHEDULE_DELAY: '100' }

const hex = (bytes: number): string => randomBytes(bytes).toString('hex')

function tenantsWithWebhook (t: Test, url: string, secret: string): { path: string, keys: FixtureKeys, addressHashKey: string } {
  const addressHashKey = randomBytes(32).toString('base64')
  const { path, keys } = writeTenants(t, (file) => {
    const acme = file.tenants.find((tenant) => tenant.id === 'acme')
    if (acme === undefined) throw new Error('no acme')
    acme.addressHashKey = addressHashKey
    acme.webhooks = [{ url, secret, events: ['verification.succeeded'] }]
  })
  return { path, keys, addressHashKey }
}

async function call (base: string, path: string, key: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number, body: any, requestId: string }> {
  const response = await fetch(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body)
  })
  return { status: response.status, body: await response.json(), requestId: response.headers.get('x-request-id') ?? '' }
}

/** The service's JSON log lines. */
function logLines (output: string): any[] {
  return output.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line))
}

const named = (spans: ReceivedSpan[], name: string): ReceivedSpan[] => spans.filter((span) => span.name === name)

/** Whether the span `id` is `ancestor` or one of its descendants. */
function withinSpan (spans: ReceivedSpan[], id: string | undefined, ancestor: string | undefined): boolean {
  for (let current = spans.find((span) => span.spanId === id); current !== undefined; current = spans.find((span) => span.spanId === current?.parentSpanId)) {
    if (current.spanId === ancestor) return true
  }
  return false
}

/** Nothing the collector received, in any form, holds one of `secrets`. */
function assertNoSecrets (t: Test, receiver: OtlpReceiver, secrets: Record<string, string>): void {
  const decoded = JSON.stringify(receiver.spans)
  const raw = Buffer.concat(receiver.bodies)
  for (const [what, secret] of Object.entries(secrets)) {
    t.notOk(decoded.includes(secret), `no span, attribute or event carries the ${what}`)
    t.equal(raw.indexOf(secret), -1, `no exported byte sequence is the ${what}`)
  }
}

async function stop (server: { child: import('node:child_process').ChildProcess }): Promise<void> {
  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  await exited
}

// 126 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('Redis, SMTP and a webhook, http/protobuf: one trace per request, continued from the caller, with no secret in it', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(() => redis.stop())
  const collector = await startOtlpReceiver(t)
  const smtp = await startSmtp(t)
  const secret = webhookSecret()
  const partner: WebhookReceiver = await startReceiver(t, secret)
  const { path, keys } = tenantsWithWebhook(t, partner.url, secret)
  const server = await startServer(t, {
    ...FAST_WEBHOOKS,
    ...FAST_EXPORT,
    TENANTS_FILE: path,
    REDIS_URL: redis.url,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    MAIL_TRANSPORT: 'smtp',
    SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`,
    MAIL_FROM: 'codes@otp.test',
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf'
  })

  const email = 'ada.lovelace@example.com'
  const caller = { traceId: hex(16), spanId: hex(8) }
  const dispatched = await call(server.base, '/otp/request', keys.acmeLive, { email }, { traceparent: `00-${caller.traceId}-${caller.spanId}-01` })
  t.equal(dispatched.status, 200)
  const code = /\b(\d{6})\b/.exec(String(smtp.received[0]?.text))?.[1] ?? ''
  t.match(code, /^\d{6}$/, 'the code arrived by mail')
  const verifier = { traceId: hex(16), spanId: hex(8) }
  const verified = await call(server.base, '/otp/verify', keys.acmeLive, { requestId: dispatched.body.data.requestId, userGuess: code }, { traceparent: `00-${verifier.traceId}-${verifier.spanId}-01` })
  t.equal(verified.status, 200)
  const receipt = String(verified.body.data.receipt)
  await partner.waitFor(() => partner.verified.length >= 1, 'the webhook')

  await collector.waitFor((spans) => named(spans, 'webhook verification.succeeded').length >= 1 && named(spans, 'POST /otp/verify').length >= 1, 'the webhook attempt span')
  t.ok(collector.contentTypes.has('application/x-protobuf'), 'exported as http/protobuf')
  const spans = collector.spans

  const [dispatchSpan] = named(spans, 'POST /otp/request')
  t.ok(dispatchSpan, 'a server span named by the route template')
  t.equal(dispatchSpan?.traceId, caller.traceId, 'the caller\'s trace is continued')
  t.equal(dispatchSpan?.parentSpanId, caller.spanId, 'as a child of the caller\'s span')
  t.equal(dispatchSpan?.kind, 2, 'a SERVER span')
  t.equal(dispatchSpan?.attributes['http.route'], '/otp/request')
  t.equal(dispatchSpan?.resource['service.name'], 'email-otp', 'OTEL_SERVICE_NAME defaults to email-otp')

  const [mailSpan] = named(spans, 'mail send smtp')
  t.equal(mailSpan?.traceId, caller.traceId, 'the mail send is in the request\'s trace')
  t.same([mailSpan?.attributes['email_otp.mail.transport'], mailSpan?.attributes['email_otp.tenant'], mailSpan?.attributes['email_otp.mode']], ['smtp', 'acme', 'live'])
  const redisSpans = spans.filter((span) => span.scope.includes('ioredis') && span.traceId === caller.traceId)
  t.ok(redisSpans.length > 0, 'Redis commands are spans of the request\'s trace (the ioredis instrumentation)')
  t.ok(redisSpans.every((span) => span.attributes['db.query.text'] === span.name), 'a Redis span names its command, never its arguments')

  const [verifySpan] = named(spans, 'POST /otp/verify')
  const [attempt] = named(spans, 'webhook verification.succeeded')
  t.equal(verifySpan?.traceId, verifier.traceId)
  t.equal(attempt?.links.length, 1, 'the attempt has one link')
  t.equal(attempt?.links[0]?.traceId, verifier.traceId, 'to the trace of the request that caused it')
  t.ok(withinSpan(spans, attempt?.links[0]?.spanId, verifySpan?.spanId), 'to a span within that request\'s server span')
  t.not(attempt?.traceId, verifier.traceId, 'in a trace of its own')
  t.equal(attempt?.attributes['http.response.status_code'], 204)
  const sent = String(partner.verified[0]?.headers.traceparent)
  t.match(sent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/, 'the webhook request carries a traceparent')
  t.equal(sent.split('-')[1], attempt?.traceId, 'of the attempt\'s trace')

  await stop(server)
  const dispatchLines = logLines(server.output()).filter((line) => line.reqId === dispatched.requestId)
  t.ok(dispatchLines.some((line) => line.msg === 'incoming request') && dispatchLines.some((line) => line.msg === 'request completed'), 'the request was logged')
  t.ok(dispatchLines.every((line) => line.traceId === caller.traceId), 'every line of the request carries the trace id')
  t.equal(dispatchLines.find((line) => line.msg === 'request completed')?.spanId, dispatchSpan?.spanId, 'and, once the span is open, its span id')
  assertNoSecrets(t, collector, {
    address: email,
    'address\'s local part': 'ada.lovelace',
    code,
    'API key': keys.acmeLive,
    receipt,
    'receipt signature': receipt.split('.')[2] ?? receipt,
    'webhook secret': secret,
    'webhook secret\'s key': secret.replace(/^whsec_/, '')
  })
})

t.test('embedded default, SES, http/json: the SDK\'s HTTP call is a child of the mail send span', async (t) => {
  const collector = await startOtlpReceiver(t)
  const ses = await startSesLocal(t)
  const { path, keys } = writeTenants(t)
  const server = await startServer(t, {
    ...FAST_EXPORT,
    TENANTS_FILE: path,
    MAIL_TRANSPORT: 'ses',
    MAIL_FROM: 'codes@otp.test',
    AWS_REGION: 'eu-west-1',
    AWS_ENDPOINT_URL_SESV2: ses,
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${collector.url}/v1/traces`,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_SERVICE_NAME: 'otp-eu'
  })
  const email = 'grace@example.com'
  const dispatched = await call(server.base, '/otp/request', keys.acmeLive, { email })
  t.equal(dispatched.status, 200)
  // The request's span ends last, possibly in a later export than its children.
  await collector.waitFor((spans) => named(spans, 'POST /otp/request').length === 1 && named(spans, 'mail send ses').length === 1 && spans.some((span) => span.kind === 3 && span.attributes['http.request.method'] === 'POST'), 'the request\'s and the SES spans')
  t.same([...collector.contentTypes], ['application/json'], 'exported as http/json')
  const [mailSpan] = named(collector.spans, 'mail send ses')
  const [request] = named(collector.spans, 'POST /otp/request')
  t.equal(mailSpan?.traceId, request?.traceId, 'without a traceparent, the request starts the trace')
  t.equal(request?.parentSpanId, '', 'as its root')
  t.equal(request?.resource['service.name'], 'otp-eu', 'OTEL_SERVICE_NAME')
  const outbound = collector.spans.find((span) => span.kind === 3 && span.attributes['http.request.method'] === 'POST')
  t.equal(outbound?.parentSpanId, mailSpan?.spanId, 'the SES API call (node:http instrumentation) is inside the mail send span')
  await stop(server)
  const completed = logLines(server.output()).find((line) => line.reqId === dispatched.requestId && line.msg === 'request completed')
  t.same([completed?.traceId, completed?.spanId], [request?.traceId, request?.spanId], 'a new trace\'s id is in the request\'s lines')
  assertNoSecrets(t, collector, { address: email, 'API key': keys.acmeLive })
})

t.test('OTEL_TRACES_EXPORTER=none: nothing is exported although an endpoint is set', async (t) => {
  const collector = await startOtlpReceiver(t)
  const { path, keys } = writeTenants(t)
  const server = await startServer(t, { ...FAST_EXPORT, TENANTS_FILE: path, OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_TRACES_EXPORTER: 'none' })
  t.equal((await call(server.base, '/otp/request', keys.acmeTest, { email: 'x@example.com' }, { traceparent: `00-${hex(16)}-${hex(8)}-01` })).status, 200)
  // A tracer would export what it holds on shutdown: after the exit, nothing can come any more.
  await stop(server)
  t.equal(collector.bodies.length, 0, 'the collector never heard from the service')
})
