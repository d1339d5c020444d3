/**
 * Refusal pacing over real sockets (REFUSAL_PACE_*): a source that keeps asking after it is
 * refused (401, 403 or 429) gets its refusals held past its burst; other sources, and the paced
 * source's admitted requests, are answered as before. Whether a refusal was held is read from
 * the service's own counters (email_otp_refusals_paced_total, email_otp_refusals_held), never
 * from how long it took: the pace is slow and its holds long (up to 30 s), so a source that
 * shares a flooding source's pace is held for seconds after the flood, whatever the machine's
 * speed, and one with its own pace is not held at all. The rate itself is tested on an
 * injected clock in test/lib/net/refusal-pacing.test.ts.
 */
import { createSign, randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { bearer, buildApp, TEST_METRICS_TOKEN, writeTenants, type Capture, type FixtureKeys } from '../helper.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { setTimeout as sleep } from 'node:timers/promises'
import { PIPELINED_PER_CONNECTION } from '../../plugins/connections.js'
import { playHost } from '../support/https-hosts.js'
import { listenApp, openConnection, send, type RawAnswer, type RawConnection } from '../support/http.js'
import { until } from '../support/wait.js'

/** One refusal a second past a burst of two, held up to 30 s: a flood of FLOOD leaves a debt of many seconds. */
const PACE = { REFUSAL_PACE_PER_SECOND: '1', REFUSAL_PACE_BURST: '2', REFUSAL_PACE_MAX_DELAY_MS: '30s' }
const FLOOD = 20
const json = { 'content-type': 'application/json' }

/** An answer, or why there was none: a held request's promise must never reject unobserved. */
type Outcome = RawAnswer | { status: 'failed', error: string }

/** A request as the flooding client sends it, on a new connection each time. */
type Ask = () => Promise<RawAnswer>

function outcome (ask: Ask): Promise<Outcome> {
  return ask().catch((error: unknown) => ({ status: 'failed' as const, error: String(error) }))
}

/** The service's own account of its pacing. */
async function pacing (app: FastifyInstance): Promise<{ paced: number, held: number }> {
  const answer = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  const read = (name: string): number => Number(new RegExp(`^${name} (\\d+)`, 'm').exec(answer.body)?.[1] ?? Number.NaN)
  return { paced: read('email_otp_refusals_paced_total'), held: read('email_otp_refusals_held') }
}

/** Requests the service ran to their 401 (counted when refused, before any hold). */
async function refusedCount (app: FastifyInstance): Promise<number> {
  const answer = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  return Number(/^email_otp_errors_total\{code="UNAUTHORIZED"\} (\d+)/m.exec(answer.body)?.[1] ?? 0)
}

/** The statuses of the answers written on a raw connection, in order. */
function statusesOf (received: string): number[] {
  return [...received.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((match) => Number(match[1]))
}

/** When the server closes a raw connection; a reset (it closed with bytes still unread) is a close too. */
async function closing (connection: RawConnection): Promise<void> {
  await connection.closed.catch(() => {})
}

/** One refused request as a pipelining client writes it, behind the others on its connection. */
const PIPELINED_REFUSAL = ((body: string) => 'POST /otp/verify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer not-a-key\r\n' +
  `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`)('{"requestId":"x","code":"123456"}')

interface Paced {
  app: FastifyInstance
  port: number
  keys: FixtureKeys
  logs: Capture
  /** Every answer still to come (held ones until the app closes). */
  pending: Array<Promise<Outcome>>
}

async function pacedApp (t: Test, env: Record<string, string> = {}, mutate?: (file: TenantsFile) => void): Promise<Paced> {
  const { path, keys } = writeTenants(t, mutate)
  const { app, logs } = await buildApp(t, { TENANTS_FILE: path, ...PACE, ...env })
  return { app, port: await listenApp(app), keys, logs, pending: [] }
}

/**
 * `count` refusals sent at once by one source; returns once each has reached the pace (answered,
 * or held now), with the number held so far. The answers of held ones come later (at the latest when
 * the app closes).
 */
async function flood (paced: Paced, ask: Ask, count = FLOOD): Promise<number> {
  let answered = 0
  for (let index = 0; index < count; index++) paced.pending.push(outcome(ask).finally(() => { answered++ }))
  await until('every refusal of the flood answered or held', async () => answered + (await pacing(paced.app)).held === count)
  return (await pacing(paced.app)).paced
}

/**
 * Sends one request and tells whether the service held it: the paced counter moves when it is
 * held, the answer comes at once when it is not. Call it once every earlier request has
 * reached the pace (after `flood`), so that only this one can move the counter.
 */
async function held (paced: Paced, ask: Ask): Promise<{ held: boolean, answer: Promise<Outcome> }> {
  const before = (await pacing(paced.app)).paced
  let settled = false
  const answer = outcome(ask).finally(() => { settled = true })
  paced.pending.push(answer)
  await until('the request answered or held', async () => settled || (await pacing(paced.app)).paced > before)
  return { held: (await pacing(paced.app)).paced > before, answer }
}

/** Closes the app (a shutdown answers every held refusal at once) and returns every answer's status. */
async function closeAndCollect (paced: Paced): Promise<Array<number | string>> {
  await paced.app.close()
  return (await Promise.all(paced.pending)).map((answer) => answer.status)
}

const unauthorized = (port: number, localAddress: string, headers: Record<string, string> = {}): Ask => async () =>
  await send({ port, localAddress, path: '/otp/verify', headers: { ...json, authorization: 'Bearer not-a-key', ...headers }, body: '{"requestId":"x","code":"123456"}', timeoutMs: 60_000 })

const dispatch = (port: number, localAddress: string, key: string, headers: Record<string, string> = {}): Ask => async () =>
  await send({ port, localAddress, path: '/otp/request', headers: { ...json, ...bearer(key), ...headers }, body: '{"email":"kim@example.com"}', timeoutMs: 60_000 })

test('a flood of 401s from one source is held past its burst; another source, and the paced source\'s admitted requests, are not', async (t) => {
  const paced = await pacedApp(t)
  const { port } = paced
  const pacedCount = await flood(paced, unauthorized(port, '127.0.0.2'))
  t.ok(pacedCount >= 1, `the flood is held past its burst (${pacedCount} of ${FLOOD} held)`)
  t.same((await held(paced, unauthorized(port, '127.0.0.2'))).held, true, 'the flooding source\'s next refusal is held: it still owes the pace')
  const other = await held(paced, unauthorized(port, '127.0.0.3'))
  t.same(other.held, false, 'another source\'s refusal is not held')
  t.equal((await other.answer).status, 401)
  const admitted = await held(paced, async () => await send({ port, localAddress: '127.0.0.2', method: 'GET', path: '/healthz' }))
  t.same(admitted.held, false, 'the paced source\'s admitted request is not held')
  t.equal((await admitted.answer).status, 200)
  const statuses = await closeAndCollect(paced)
  t.same(new Set(statuses), new Set([401, 200]), 'every held refusal was sent on the shutdown, none dropped')
})

test('a flood of 403s is held past its burst, source by source', async (t) => {
  // Both sources are in a network the tenant blocks: each request is refused 403 SOURCE_BLOCKED.
  const paced = await pacedApp(t, {}, (file) => { file.tenants[0]!.blockedNetworks = ['127.0.0.0/29'] })
  const { port, keys } = paced
  const pacedCount = await flood(paced, dispatch(port, '127.0.0.2', keys.acmeLive))
  t.ok(pacedCount >= 1, `the flood of 403s is held past its burst (${pacedCount} of ${FLOOD} held)`)
  t.same((await held(paced, dispatch(port, '127.0.0.2', keys.acmeLive))).held, true, 'the flooding source\'s next 403 is held')
  const other = await held(paced, dispatch(port, '127.0.0.3', keys.acmeLive))
  t.same(other.held, false, 'another source\'s 403 is not held')
  t.match(await other.answer, { status: 403, body: { code: 'SOURCE_BLOCKED' } })
  t.same(new Set(await closeAndCollect(paced)), new Set([403]))
})

test('a flood of 429s is held past its burst, source by source', async (t) => {
  // One dispatch a minute per key: the first is sent, every later one is refused 429 RATE_LIMITED.
  const paced = await pacedApp(t, { RATE_LIMIT_KEY: '1/1m' })
  const { port, keys } = paced
  t.equal((await dispatch(port, '127.0.0.2', keys.acmeLive)()).status, 200, 'the key\'s one dispatch')
  const pacedCount = await flood(paced, dispatch(port, '127.0.0.2', keys.acmeLive))
  t.ok(pacedCount >= 1, `the flood of 429s is held past its burst (${pacedCount} of ${FLOOD} held)`)
  t.same((await held(paced, dispatch(port, '127.0.0.2', keys.acmeLive))).held, true, 'the flooding source\'s next 429 is held')
  const other = await held(paced, dispatch(port, '127.0.0.3', keys.acmeLive))
  t.same(other.held, false, 'another source\'s 429 is not held')
  t.match(await other.answer, { status: 429, body: { code: 'RATE_LIMITED' } })
  t.same(new Set(await closeAndCollect(paced)), new Set([429]))
})

const feedback = (port: number, localAddress: string, body: string, contentType = 'text/plain', chunked = false): Ask => async () =>
  await send({ port, localAddress, path: '/feedback/ses', headers: { 'content-type': contentType }, body, chunked, timeoutMs: 60_000 })

test('POST /feedback/ses takes no key: a flood of malformed bodies (400, 413, 415) is held past its burst, source by source; 404s elsewhere are not', async (t) => {
  const paced = await pacedApp(t, { SES_FEEDBACK_TOPIC_ARNS: 'arn:aws:sns:eu-west-1:123456789012:ses-events' })
  const { port } = paced
  // The red team's body: 256 KiB of `[`, refused 400 SNS_MESSAGE_INVALID.
  const deep = '['.repeat(262_000)
  const pacedCount = await flood(paced, feedback(port, '127.0.0.2', deep))
  t.ok(pacedCount >= 1, `the flood of 400s is held past its burst (${pacedCount} of ${FLOOD} held)`)
  t.same((await held(paced, feedback(port, '127.0.0.2', '{"Type":"Notification"}'))).held, true, 'an envelope that is not SNS\'s (400) is held')
  t.same((await held(paced, feedback(port, '127.0.0.2', '{}', 'image/png'))).held, true, 'a 415 is held')
  t.same((await held(paced, feedback(port, '127.0.0.2', `"${'x'.repeat(300_000)}"`, 'text/plain', true))).held, true, 'a 413 is held')
  const other = await held(paced, feedback(port, '127.0.0.3', deep))
  t.same(other.held, false, 'another source\'s malformed body is not held')
  t.match(await other.answer, { status: 400, body: { code: 'SNS_MESSAGE_INVALID' } })
  const elsewhere = await held(paced, async () => await send({ port, localAddress: '127.0.0.2', method: 'GET', path: '/nope' }))
  t.same(elsewhere.held, false, 'the paced source\'s 404 on another route is not held: only this route paces every 4xx')
  t.equal((await elsewhere.answer).status, 404)
  t.same(new Set(await closeAndCollect(paced)), new Set([400, 404, 413, 415]))
})

const TOPIC = 'arn:aws:sns:eu-west-1:123456789012:ses-events'

/** The red team's message: SNS's shape, a made-up certificate URL on the topic region's host, 205 KB. */
const failingCertificate = JSON.stringify({
  Type: 'Notification',
  MessageId: 'm-1',
  TopicArn: TOPIC,
  Message: 'x'.repeat(200 * 1024),
  Timestamp: new Date().toISOString(),
  SignatureVersion: '1',
  Signature: 'AAAA',
  SigningCertURL: 'https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc123.pem'
})

test('POST /feedback/ses: a flood of one message whose certificate URL failed (503) is held to its sender\'s pace and logged once; another sender is answered at once', async (t) => {
  // SNS's host, played on loopback: every certificate it is asked for is 404.
  const sns = await playHost(t, 'sns.eu-west-1.amazonaws.com', (_request, response) => { response.writeHead(404).end() })
  const paced = await pacedApp(t, { SES_FEEDBACK_TOPIC_ARNS: TOPIC })
  const { app, port, logs } = paced
  const ask = feedback(port, '127.0.0.2', failingCertificate)
  const linesAtStart = logs.lines.length
  t.match(await ask(), { status: 503, body: { code: 'UNAVAILABLE' } }, 'the certificate is fetched, and the fetch fails')
  // Four closed loops from one source, as the red team's: unpaced, each answer came in about a
  // millisecond. Paced (a burst of 2, then 1 a second), at most the burst and one a second of the
  // window are answered within it; the rest wait for the pace, whatever the machine's speed.
  const WINDOW_MS = 1500
  const window = { open: true }
  let answeredInWindow = 0
  let inFlight = 0
  const loop = async (): Promise<void> => {
    while (window.open) {
      inFlight++
      const answer = outcome(ask)
      paced.pending.push(answer)
      await answer
      inFlight--
      if (window.open) answeredInWindow++
    }
  }
  for (let index = 0; index < 4; index++) void loop()
  await sleep(WINDOW_MS)
  window.open = false
  t.ok(answeredInWindow <= 2 + Math.ceil(WINDOW_MS / 1000) + 1, `held to the pace: ${answeredInWindow} answers in ${WINDOW_MS} ms`)
  await until('each loop\'s last request held or answered', async () => (await pacing(app)).held === inFlight)
  t.same((await held(paced, ask)).held, true, 'the flooding source\'s next 503 is held: it still owes the pace')
  const other = await held(paced, feedback(port, '127.0.0.3', failingCertificate))
  t.same(other.held, false, 'another source\'s is not held')
  t.match(await other.answer, { status: 503, body: { code: 'UNAVAILABLE' } })
  t.equal(sns.requests.length, 1, 'the failed URL was fetched once')
  const statuses = await closeAndCollect(paced)
  t.same(new Set(statuses), new Set([503]), 'every held answer was sent on the shutdown')
  const unavailable = (await app.metrics.registry.getSingleMetric('email_otp_ses_feedback_total')?.get())?.values.find((value) => value.labels.outcome === 'unavailable')?.value
  t.equal(unavailable, statuses.length + 1, 'every answer is counted as `unavailable`')
  const lines = logs.lines.slice(linesAtStart).map((line) => JSON.parse(line) as { level: number, msg: string, certificateUrl?: string })
  t.same(lines.filter((line) => line.level >= 40).map((line) => [line.msg, line.certificateUrl]), [['SNS signing certificate could not be fetched; messages naming it are answered 503 for a minute (SNS retries)', 'https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc123.pem']], `one warning for ${statuses.length + 1} answers, none with a stack`)
  t.notMatch(logs.lines.slice(linesAtStart).join('\n'), /"stack"/, 'no stack trace')
})

/** A SubscriptionConfirmation signed as SNS signs it (version 2), with the fixture's key. */
function signedConfirmation (origin: string): string {
  const message: Record<string, string> = { Type: 'SubscriptionConfirmation', MessageId: randomUUID(), Token: 'tok', TopicArn: TOPIC, Message: 'confirm', SubscribeURL: `${origin}/confirm?Token=tok`, Timestamp: new Date().toISOString() }
  const signer = createSign('RSA-SHA256')
  for (const field of ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type']) signer.update(`${field}\n${message[field] ?? ''}\n`)
  const key = readFileSync(new URL('../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')
  return JSON.stringify({ ...message, SignatureVersion: '2', Signature: signer.sign(key, 'base64'), SigningCertURL: `${origin}/SimpleNotificationService-0123456789abcdef.pem` })
}

test('POST /feedback/ses: a 503 of the service\'s own reach (a subscription SNS\'s host did not confirm) is not paced', async (t) => {
  const cert = readFileSync(new URL('../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')
  // SNS's host serves its certificate, but does not answer confirmations.
  const sns = await playHost(t, 'sns.eu-west-1.amazonaws.com', (request, response) => {
    if (request.url?.endsWith('.pem') === true) response.writeHead(200).end(cert)
    else response.writeHead(503).end()
  })
  const paced = await pacedApp(t, { SES_FEEDBACK_TOPIC_ARNS: TOPIC })
  const confirmation: Ask = async () => await send({ port: paced.port, localAddress: '127.0.0.2', path: '/feedback/ses', headers: { 'content-type': 'text/plain' }, body: signedConfirmation(sns.origin), timeoutMs: 60_000 })
  t.equal(await flood(paced, confirmation), 0, 'none of the flood is held: SNS is not held back for the service\'s trouble')
  t.same(new Set(await closeAndCollect(paced)), new Set([503]))
  t.equal(sns.requests.filter((request) => request.path.startsWith('/confirm')).length, FLOOD, 'each was signed, checked and tried')
})

test('IPv6 clients are paced per /64: another address of the /64 shares the pace, another /64 has its own', async (t) => {
  const paced = await pacedApp(t, { TRUST_PROXY: '127.0.0.1/32' })
  const { port } = paced
  const from = (client: string): Ask => unauthorized(port, '127.0.0.1', { 'x-forwarded-for': client })
  const pacedCount = await flood(paced, from('2001:db8:1:1::1'))
  t.ok(pacedCount >= 1, `the flood is held past its burst (${pacedCount} of ${FLOOD} held)`)
  t.same((await held(paced, from('2001:db8:1:1:ffff::2'))).held, true, 'another address in the same /64 is held: one pace for the /64')
  const other = await held(paced, from('2001:db8:1:2::1'))
  t.same(other.held, false, 'an address of the next /64 is not held')
  t.equal((await other.answer).status, 401)
  t.same(new Set(await closeAndCollect(paced)), new Set([401]))
})

test('POST /feedback/ses paces IPv6 clients per /48, as it counts their certificate fetches: another /64 of the /48 shares the pace, another /48 has its own', async (t) => {
  const paced = await pacedApp(t, { TRUST_PROXY: '127.0.0.1/32', SES_FEEDBACK_TOPIC_ARNS: 'arn:aws:sns:eu-west-1:123456789012:ses-events' })
  const { port } = paced
  const from = (client: string): Ask => async () =>
    await send({ port, localAddress: '127.0.0.1', path: '/feedback/ses', headers: { 'content-type': 'text/plain', 'x-forwarded-for': client }, body: '[', timeoutMs: 60_000 })
  const pacedCount = await flood(paced, from('2001:db8:1:1::1'))
  t.ok(pacedCount >= 1, `the flood is held past its burst (${pacedCount} of ${FLOOD} held)`)
  t.same((await held(paced, from('2001:db8:1:ffff::1'))).held, true, 'another /64 of the same /48 is held: one pace for the /48')
  const other = await held(paced, from('2001:db8:2:1::1'))
  t.same(other.held, false, 'an address of the next /48 is not held')
  t.match(await other.answer, { status: 400, body: { code: 'SNS_MESSAGE_INVALID' } })
  const keyed = await held(paced, unauthorized(port, '127.0.0.1', { 'x-forwarded-for': '2001:db8:1:2::1' }))
  t.same(keyed.held, false, 'a route with a key keeps the /64: another /64 of the /48 is not held there')
  t.equal((await keyed.answer).status, 401)
  t.same(new Set(await closeAndCollect(paced)), new Set([400, 401]))
})

test('behind TRUST_PROXY each forwarded client has its own pace, so a proxy\'s other clients are not held', async (t) => {
  const paced = await pacedApp(t, { TRUST_PROXY: '127.0.0.1/32' })
  const { port } = paced
  const from = (client: string): Ask => unauthorized(port, '127.0.0.1', { 'x-forwarded-for': client })
  t.ok(await flood(paced, from('198.51.100.7')) >= 1, 'the forwarded client\'s flood is held past its burst')
  const other = await held(paced, from('198.51.100.8'))
  t.same(other.held, false, 'another client through the same proxy is not held')
  t.equal((await other.answer).status, 401)
  t.same(new Set(await closeAndCollect(paced)), new Set([401]))
})

test('a partner backend is the source of its refusals, whatever End-User-IP it names', async (t) => {
  // The tenant blocks a network its backend's end users come from: 403 SOURCE_BLOCKED for each of them.
  const paced = await pacedApp(t, {}, (file) => { file.tenants[0]!.blockedNetworks = ['198.51.100.0/24'] })
  const { port, keys } = paced
  const naming = (backend: string, endUser: string): Ask => dispatch(port, backend, keys.acmeLive, { 'end-user-ip': endUser })
  const pacedCount = await flood(paced, naming('127.0.0.2', '198.51.100.1'))
  t.ok(pacedCount >= 1, `the backend's flood is held past its burst (${pacedCount} of ${FLOOD} held)`)
  const nextEndUser = await held(paced, naming('127.0.0.2', '198.51.100.2'))
  t.same(nextEndUser.held, true, 'the same backend naming another end user is held: a backend cannot shed its pace by naming new end users')
  const otherBackend = await held(paced, naming('127.0.0.3', '198.51.100.1'))
  t.same(otherBackend.held, false, 'another backend naming the flood\'s end user is not held')
  t.match(await otherBackend.answer, { status: 403, body: { code: 'SOURCE_BLOCKED' } })
  t.same(new Set(await closeAndCollect(paced)), new Set([403]))
})

test('without a pace no refusal is held', async (t) => {
  const paced = await pacedApp(t, { REFUSAL_PACE_PER_SECOND: '0' })
  const { app, port } = paced
  const answers = await Promise.all(Array.from({ length: FLOOD }, async () => await unauthorized(port, '127.0.0.2')()))
  t.same(new Set(answers.map((answer) => answer.status)), new Set([401]), 'a flood far past the burst, each answered without waiting for a shutdown')
  const metrics = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  t.notMatch(metrics.body, /email_otp_refusals_paced_total/, 'no pacing at all')
})

test('a shutdown answers the refusals it holds at once', async (t) => {
  const paced = await pacedApp(t)
  // Twice the flood: the last holds reach the longest delay, 30 s.
  const count = await flood(paced, unauthorized(paced.port, '127.0.0.2'), 2 * FLOOD)
  t.ok(count >= 1, `${count} refusals held`)
  const closing = Date.now()
  const statuses = await closeAndCollect(paced)
  // A stall guard far from any machine's speed: without the shutdown, the longest holds alone last 30 s.
  t.ok(Date.now() - closing < 20_000, `all answered ${Date.now() - closing} ms after the shutdown began`)
  t.same(statuses, Array.from({ length: 2 * FLOOD }, () => 401), 'every held refusal is sent, not dropped')
})

test('1,000 refusals pipelined on one connection are not all run: it is served one request at a time, so the pace holds it, and it is closed once too many wait', async (t) => {
  const paced = await pacedApp(t)
  const connection = await openConnection(paced.port, '127.0.0.2')
  let closed = false
  void closing(connection).then(() => { closed = true })
  connection.socket.write(PIPELINED_REFUSAL.repeat(1000))
  await until('the connection closed, or every request run', async () => closed || await refusedCount(paced.app) >= 1000)
  t.ok(closed, 'the server closed the connection')
  const run = await refusedCount(paced.app)
  // Those the burst answers at once and the first the pace holds (4); a busy machine may let
  // that hold end before the rest of the bytes are read, and run one or two more.
  t.ok(run <= 6, `${run} of the 1,000 were run`)
  t.ok((await pacing(paced.app)).held <= 1, 'one refusal held at most: the process\'s cap of held refusals is not filled')
  t.same(statusesOf(connection.received()).slice(0, 2), [401, 401], 'the burst was answered at once, in order')
})

test(`a client pipelining ${PIPELINED_PER_CONNECTION} requests behind a held refusal waits for it as a client that waits for each answer; one more has the held one answered with Connection: close and the rest never run`, async (t) => {
  const paced = await pacedApp(t)
  const { app, port } = paced
  // The source owes the pace for seconds: its next refusal is held.
  t.ok(await flood(paced, unauthorized(port, '127.0.0.2')) >= 1, 'the source\'s flood is held past its burst')
  const before = await refusedCount(app)
  const pacedBefore = (await pacing(app)).paced
  const within = await openConnection(port, '127.0.0.2')
  let withinClosed = false
  void closing(within).then(() => { withinClosed = true })
  within.socket.write(PIPELINED_REFUSAL.repeat(1 + PIPELINED_PER_CONNECTION))
  await until('the first pipelined refusal held', async () => (await pacing(app)).paced > pacedBefore)
  // Room for a request that would wrongly run behind it.
  await sleep(200)
  t.equal(await refusedCount(app) - before, 1, `the first is run and held; the ${PIPELINED_PER_CONNECTION} behind it are not run`)
  const over = await openConnection(port, '127.0.0.2')
  let overClosed = false
  void closing(over).then(() => { overClosed = true })
  over.socket.write(PIPELINED_REFUSAL.repeat(2 + PIPELINED_PER_CONNECTION))
  await until('the first request of that connection held, or more of its requests run', async () => (await pacing(app)).paced > pacedBefore + 1 || await refusedCount(app) - before > 2)
  // Room for a request that would wrongly run behind it, or a close that would lose its answer.
  await sleep(200)
  t.equal(await refusedCount(app) - before, 2, 'of that connection, only the first request was run')
  t.equal(overClosed, false, `${PIPELINED_PER_CONNECTION + 1} waiting: the connection is not closed before the running request is answered`)
  t.equal(withinClosed, false, 'the connection within the bound is kept')
  t.same(new Set(await closeAndCollect(paced)), new Set([401]), 'the flood\'s held refusals are sent on the shutdown')
  await closing(within)
  t.same(statusesOf(within.received()), [401], 'a shutdown sends the held answer, starts none of the requests waiting behind it, and closes their connection')
  await closing(over)
  t.same(statusesOf(over.received()), [401], 'past the bound, the running request keeps its answer and none waiting is run')
  t.match(over.received(), /\r\nConnection: close\r\n/i, 'the answer says the connection closes')
})
