import t, { type Test } from 'tap'
import * as sesModel from '@aws-sdk/client-sesv2'
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { once } from 'node:events'
import { createServer as createNetServer } from 'node:net'
import { freePort } from '../../../support/redis.js'
import { deliveryFailure, sesStore, startSesLocal, startSesProxy, startSilentPeer, startSmtp, type StoredEmail } from '../../../support/mail-peers.js'
import { until } from '../../../support/wait.js'
import { FailoverTransport } from '../../../../lib/mail/delivery/failover.js'
import { SmtpTransport } from '../../../../lib/mail/delivery/smtp-transport.js'
import { SesTransport } from '../../../../lib/mail/delivery/ses-transport.js'
import { composeVerificationMessage } from '../../../../lib/mail/templating/message.js'
import { DeliveryError, type DeliveryFailureKind, type OutgoingMessage } from '../../../../lib/mail/delivery/transport.js'

const CREDENTIALS = { accessKeyId: 'x', secretAccessKey: 'x' }
const TIMEOUT_MS = 1000
/**
 * A stall guard over the timeout, not a measurement: without the deadline a peer that never
 * answers would hold a send for as long as the socket stays open, and the kind of each failure
 * says which bound ended it. Ten times the timeout: no machine's speed decides.
 */
const SLACK_MS = 9000

function message (overrides: Partial<OutgoingMessage> = {}): OutgoingMessage {
  return {
    ...composeVerificationMessage({
      to: 'person@example.com',
      from: 'Acme <no-reply@acme.test>',
      replyTo: 'support@acme.test',
      brand: 'Acme',
      code: '482910',
      ttlSeconds: 600,
      locale: 'en',
      tags: { tenant: 'acme', mode: 'live' }
    }),
    ...overrides
  }
}

function transportFor (endpoint: string, options: { timeoutMs?: number, configurationSet?: string, batchWaitMs?: number } = {}): SesTransport {
  return new SesTransport({
    timeoutMs: options.timeoutMs ?? TIMEOUT_MS,
    configurationSet: options.configurationSet,
    ...(options.batchWaitMs === undefined ? {} : { batchWaitMs: options.batchWaitMs }),
    region: 'us-east-1',
    endpoint,
    credentials: CREDENTIALS
  })
}

interface Recorded { method: string, url: string, body: unknown }

/**
 * A plain HTTP peer speaking the SES v2 wire format: records each request and answers with
 * the status, headers and JSON body given, as SES itself would for that outcome.
 */
async function startFakeSes (status: number, headers: Record<string, string>, body: unknown, delayMs = 0): Promise<{ endpoint: string, requests: Recorded[] }> {
  const requests: Recorded[] = []
  const server = createHttpServer((request: IncomingMessage, response: ServerResponse) => {
    let raw = ''
    request.on('data', (chunk: Buffer) => { raw += chunk.toString() })
    request.on('end', () => {
      requests.push({ method: request.method ?? '', url: request.url ?? '', body: JSON.parse(raw) as unknown })
      setTimeout(() => {
        if (response.destroyed) return
        response.writeHead(status, { 'content-type': 'application/json', ...headers })
        response.end(JSON.stringify(body))
      }, delayMs)
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    server.closeAllConnections()
    server.close()
    await once(server, 'close')
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  return { endpoint: `http://127.0.0.1:${address.port}`, requests }
}

t.test('aws-ses-v2-local receives the composed message', async (t) => {
  const base = await startSesLocal(t)
  const transport = transportFor(base)
  t.teardown(() => transport.close())

  t.equal(await transport.ready(), true, 'ready with a region configured')

  for (const locale of ['en', 'de'] as const) {
    await fetch(`${base}/clear-store`, { method: 'POST' })
    const outgoing = composeVerificationMessage({
      to: 'person@example.com',
      from: 'Acme <no-reply@acme.test>',
      replyTo: 'support@acme.test',
      brand: 'Acme',
      code: '482910',
      ttlSeconds: 600,
      locale,
      tags: { tenant: 'acme' }
    })
    const messageId = await transport.send(outgoing)

    const store = await (await fetch(`${base}/store`)).json() as { emails: StoredEmail[] }
    t.ok(typeof messageId === 'string' && messageId !== '', `${locale}: SES's MessageId of it (${String(messageId)})`)
    t.equal(store.emails.length, 1, `${locale}: one mail stored`)
    const [email] = store.emails
    if (email === undefined) return
    t.same(email.destination.to, ['person@example.com'], `${locale}: recipient`)
    t.equal(email.from, 'Acme <no-reply@acme.test>', `${locale}: sender`)
    t.same(email.replyTo, ['support@acme.test'], `${locale}: reply-to`)
    t.equal(email.subject, outgoing.subject, `${locale}: subject`)
    t.notMatch(email.subject, '482910', `${locale}: no code in the subject`)
    t.equal(email.body.text, outgoing.text, `${locale}: text body`)
    t.equal(email.body.html, outgoing.html, `${locale}: html body`)
    t.match(email.body.text, '482910', `${locale}: code in the text`)
    t.match(email.body.html, '482910', `${locale}: code in the html`)
  }

  // aws-ses-v2-local answers a malformed request with a bare 400 that names no error type
  // (real SES sends BadRequestException): the SDK calls it "Unknown", and so do we.
  const { error } = await deliveryFailure(() => transport.send(message({ subject: '' })))
  t.equal(error.kind, 'unknown', 'untyped 400 from the emulator')
  t.match(error.message, 'HTTP 400')
  t.notMatch(error.message, 'person@example.com')

  await transport.close()
  t.equal(await transport.ready(), false, 'not ready once closed')
  const closed = await deliveryFailure(() => transport.send(message()))
  t.equal(closed.error.kind, 'connection', 'send after close fails')
})

t.test('request shape: charset, tags sanitized, configuration set, reply-to', async (t) => {
  const peer = await startFakeSes(200, {}, { MessageId: 'm-1' })
  const transport = transportFor(peer.endpoint, { configurationSet: 'otp-events' })
  t.teardown(() => transport.close())

  await transport.send(message({
    tags: { tenant: 'acme corp/eu', 'mode!': 'live', empty: '', ['x'.repeat(300)]: 'y'.repeat(300) }
  }))

  t.equal(peer.requests.length, 1)
  const [request] = peer.requests
  t.equal(request?.method, 'POST')
  t.equal(request?.url, '/v2/email/outbound-emails')
  t.match(request?.body, {
    FromEmailAddress: 'Acme <no-reply@acme.test>',
    Destination: { ToAddresses: ['person@example.com'] },
    ReplyToAddresses: ['support@acme.test'],
    ConfigurationSetName: 'otp-events',
    Content: {
      Simple: {
        Subject: { Charset: 'UTF-8', Data: 'Your Acme verification code' },
        Body: {
          Text: { Charset: 'UTF-8', Data: /482910/ },
          Html: { Charset: 'UTF-8', Data: /482910/ }
        }
      }
    },
    EmailTags: [
      { Name: 'tenant', Value: 'acme_corp_eu' },
      { Name: 'mode_', Value: 'live' },
      { Name: 'x'.repeat(256), Value: 'y'.repeat(256) }
    ]
  })
  const body = request?.body as { EmailTags?: unknown[] } | undefined
  t.equal(body?.EmailTags?.length, 3, 'the tag with an empty value is dropped')
})

/**
 * How the transport classifies each error of the SES v2 service model, SendEmail's own first
 * (those its documentation lists it throwing), with the fault and HTTP status the model gives
 * it. The model is the SDK's: a renamed, re-faulted, re-numbered or new error fails the test
 * below, so that its kind is decided again, on purpose.
 */
const MODEL_ERRORS: Record<string, { fault: 'client' | 'server', status: number, kind: DeliveryFailureKind }> = {
  MessageRejected: { fault: 'client', status: 400, kind: 'rejected' },
  MailFromDomainNotVerifiedException: { fault: 'client', status: 400, kind: 'rejected' },
  AccountSuspendedException: { fault: 'client', status: 400, kind: 'rejected' },
  SendingPausedException: { fault: 'client', status: 400, kind: 'rejected' },
  BadRequestException: { fault: 'client', status: 400, kind: 'rejected' },
  // A configuration set or identity the account lacks: the operator's error; fails over.
  NotFoundException: { fault: 'client', status: 404, kind: 'provider' },
  TooManyRequestsException: { fault: 'client', status: 429, kind: 'throttled' },
  LimitExceededException: { fault: 'client', status: 400, kind: 'throttled' },
  // Any operation's.
  InternalServiceErrorException: { fault: 'server', status: 500, kind: 'provider' },
  // Other operations' only: should SES ever answer a send with one, it is nothing we know.
  AlreadyExistsException: { fault: 'client', status: 400, kind: 'unknown' },
  ConcurrentModificationException: { fault: 'server', status: 500, kind: 'provider' },
  ConflictException: { fault: 'client', status: 409, kind: 'unknown' },
  InvalidNextTokenException: { fault: 'client', status: 400, kind: 'unknown' }
}

interface ModelError {
  name: string
  namespace: string
  fault: string
  status: number
  members: string[]
}

/**
 * The error shapes the SDK bundles from the SES v2 service model: exported as `<Name>$`,
 * `[-3 (an error), namespace, name, { error: fault, httpError: status }, member names, …]`.
 */
function modelErrors (): ModelError[] {
  const shapes: ModelError[] = []
  for (const [exported, value] of Object.entries(sesModel)) {
    if (!exported.endsWith('$') || !Array.isArray(value) || value[0] !== -3) continue
    const [, namespace, name, traits, members] = value as unknown[]
    // The service's own errors; the SDK's base class lives in a synthetic namespace.
    if (namespace !== 'com.amazonaws.sesv2' || typeof name !== 'string') continue
    const { error: fault, httpError: status } = (typeof traits === 'object' && traits !== null ? traits : {}) as { error?: unknown, httpError?: unknown }
    shapes.push({ name, namespace, fault: String(fault), status: Number(status), members: Array.isArray(members) ? members.map(String) : [] })
  }
  return shapes
}

/** What SES sends for an error of its model: the status, the type header, a JSON body of its members. */
function sesErrorAnswer (error: ModelError, message: string): { status: number, headers: Record<string, string>, body: Record<string, string> } {
  return {
    status: error.status,
    headers: { 'x-amzn-errortype': `${error.name}:http://internal.amazon.com/coral/${error.namespace}/`, 'x-amzn-requestid': 'req-123' },
    body: Object.fromEntries(error.members.map((member) => [member, member === 'message' ? message : '']))
  }
}

t.test('every error of the SES v2 model, as SES sends it, maps to its delivery failure kind', async (t) => {
  const errors = modelErrors()
  t.same(errors.map((error) => error.name).sort(), Object.keys(MODEL_ERRORS).sort(), 'the table classifies every error the model has, and only those')
  for (const error of errors) {
    const expected = MODEL_ERRORS[error.name]
    if (expected === undefined) continue
    t.same([error.fault, error.status], [expected.fault, expected.status], `${error.name}: the model's fault and status are the ones its kind was decided on`)
    const ErrorClass = (sesModel as unknown as Record<string, new (options: { message: string, $metadata: object }) => { name: string, $fault: string }>)[error.name]
    const instance = ErrorClass === undefined ? undefined : new ErrorClass({ message: 'x', $metadata: {} })
    t.same([instance?.name, instance?.$fault], [error.name, error.fault], `${error.name}: the SDK's class for it agrees`)

    // SES quotes the failing identity in its messages: it must not reach the DeliveryError.
    const answer = sesErrorAnswer(error, 'Email address is not verified: person@example.com')
    const peer = await startFakeSes(answer.status, answer.headers, answer.body)
    // The SDK retries throttling and server faults after a backoff of up to a second: leave
    // room for it, so that the deadline does not turn the answer into a timeout.
    const transport = transportFor(peer.endpoint, { timeoutMs: 5000 })
    const { error: failure } = await deliveryFailure(() => transport.send(message()))
    await transport.close()
    t.equal(failure.kind, expected.kind, `${error.name} (${error.fault} fault, HTTP ${error.status}) -> ${expected.kind}`)
    t.match(failure.message, error.name, `${error.name}: names the exception`)
    t.match(failure.message, 'req-123', `${error.name}: carries the request id`)
    t.notMatch(failure.message, 'person@example.com', `${error.name}: no recipient in the message`)
    t.notMatch(failure.message, '482910', `${error.name}: no code in the message`)
    t.equal(failure.cause, undefined, `${error.name}: the SDK error is not attached`)
  }
})

t.test('a closed port fails fast as a connection error', async (t) => {
  const port = await freePort()
  const transport = transportFor(`http://127.0.0.1:${port}`)
  t.teardown(() => transport.close())
  const { error, elapsed } = await deliveryFailure(() => transport.send(message()))
  t.equal(error.kind, 'connection')
  t.ok(elapsed < TIMEOUT_MS + SLACK_MS, `failed in ${Math.round(elapsed)} ms`)
  t.notMatch(error.message, 'person@example.com')
})

t.test('a peer that resets the connection is a connection failure, not a timeout', async (t) => {
  // The SDK names a reset TimeoutError (so that it retries it); its code says what happened.
  const peer = createNetServer((socket) => { socket.once('data', () => { socket.resetAndDestroy() }) })
  peer.listen(0, '127.0.0.1')
  await once(peer, 'listening')
  t.teardown(() => { peer.close() })
  const address = peer.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  const transport = transportFor(`http://127.0.0.1:${address.port}`)
  t.teardown(() => transport.close())
  const { error } = await deliveryFailure(() => transport.send(message()))
  t.equal(error.kind, 'connection')
  t.match(error.message, 'ECONNRESET')
})

t.test('a peer that accepts and never answers times out within the bound', async (t) => {
  const port = await startSilentPeer(t)
  const transport = transportFor(`http://127.0.0.1:${port}`)
  t.teardown(() => transport.close())
  const { error, elapsed } = await deliveryFailure(() => transport.send(message()))
  t.equal(error.kind, 'timeout')
  t.ok(elapsed >= TIMEOUT_MS - 100, `did not give up early (${Math.round(elapsed)} ms)`)
  t.ok(elapsed < TIMEOUT_MS + SLACK_MS, `failed in ${Math.round(elapsed)} ms`)
})

t.test('retries share one deadline', async (t) => {
  // Each attempt stays under the per-attempt timeout, then fails with a retryable server fault; the
  // second attempt would end past the deadline, which must cut it short.
  const timeoutMs = 2000
  const internal = modelErrors().find((error) => error.name === 'InternalServiceErrorException')
  if (internal === undefined) throw new Error('InternalServiceErrorException is not in the SES v2 model')
  const answer = sesErrorAnswer(internal, 'internal failure')
  const peer = await startFakeSes(answer.status, answer.headers, answer.body, timeoutMs * 0.6)
  const transport = transportFor(peer.endpoint, { timeoutMs })
  t.teardown(() => transport.close())
  const { error, elapsed } = await deliveryFailure(() => transport.send(message()))
  t.equal(error.kind, 'timeout')
  t.equal(peer.requests.length, 2, 'the SDK retried once (maxAttempts 2)')
  t.ok(elapsed < timeoutMs + SLACK_MS, `failed in ${Math.round(elapsed)} ms`)
})

/** A message of the Acme tenant to `to`, in `locale`, tagged with its own requestId. */
function mate (to: string, locale: 'en' | 'de' | 'fr' | 'es', overrides: Partial<OutgoingMessage> = {}): OutgoingMessage {
  return {
    ...composeVerificationMessage({
      to,
      from: 'Acme <no-reply@acme.test>',
      replyTo: 'support@acme.test',
      brand: 'Acme',
      code: String(100000 + to.length * 7919 % 900000),
      ttlSeconds: 600,
      locale,
      tags: { tenant: 'acme', mode: 'live', requestId: `r-${to}` }
    }),
    ...overrides
  }
}

/** Settles a send as 'sent' or its DeliveryError's kind, and the error's message. */
async function settle (send: Promise<unknown>): Promise<{ kind: string, message: string, messageId?: unknown }> {
  try {
    return { kind: 'sent', message: '', messageId: await send }
  } catch (error) {
    return error instanceof DeliveryError ? { kind: error.kind, message: error.message } : { kind: 'thrown', message: String(error) }
  }
}

async function outcome (send: Promise<unknown>): Promise<string> {
  return (await settle(send)).kind
}

t.test('batching: messages that arrive while a call is in flight leave in one SendBulkEmail, each exactly as SendEmail sends it', async (t) => {
  const base = await startSesLocal(t)
  const proxy = await startSesProxy(t, base)
  // A wait longer than the test: the batch leaves when the call in flight returns.
  const transport = transportFor(proxy.endpoint, { batchWaitMs: 60_000 })
  t.teardown(() => transport.close())

  proxy.hold((request) => request.to[0] === 'first@example.com')
  const first = transport.send(mate('first@example.com', 'en'))
  await until('the first call reaches SES', () => proxy.requests.length === 1)
  const mates = [
    mate('de@example.com', 'de'),
    mate('fr@example.com', 'fr'),
    // What looks like template syntax, markup and non-ASCII is the message's, not SES's to render.
    mate('es@example.com', 'es', { subject: 'Código {{subject}} & <b>', html: '<p>{{html}} {{{text}}} &amp; ñ</p>', text: 'Texto {{text}} ñ' })
  ]
  const sends = mates.map((message) => transport.send(message))
  // Another sender shares no call with Acme's messages, and finds none of its own in flight.
  const other = transport.send(mate('globex@example.com', 'en', { from: 'Globex <no-reply@globex.test>', replyTo: undefined }))
  await other
  proxy.release()
  await first
  await Promise.all(sends)

  t.same(proxy.requests, [
    { bulk: false, to: ['first@example.com'] },
    { bulk: false, to: ['globex@example.com'] },
    { bulk: true, to: ['de@example.com', 'fr@example.com', 'es@example.com'] }
  ], 'one SendEmail each for the lone messages, one SendBulkEmail for those that waited')
  const stored = await sesStore(base)
  for (const message of mates) {
    const email = stored.find((candidate) => candidate.destination.to[0] === message.to)
    t.same(email?.destination.to, [message.to], `${message.to}: its own destination`)
    t.equal(email?.from, message.from, `${message.to}: sender`)
    t.same(email?.replyTo, [message.replyTo], `${message.to}: reply-to`)
    t.equal(email?.subject, message.subject, `${message.to}: subject as composed`)
    t.equal(email?.body.text, message.text, `${message.to}: text as composed`)
    t.equal(email?.body.html, message.html, `${message.to}: html as composed`)
  }
})

t.test('batching: each message is answered by its own destination\'s status', async (t) => {
  const base = await startSesLocal(t)
  const proxy = await startSesProxy(t, base)
  const transport = transportFor(proxy.endpoint, { batchWaitMs: 60_000 })
  t.teardown(() => transport.close())
  proxy.refuse.add('refused@example.com')

  proxy.hold((request) => request.to[0] === 'first@example.com')
  const first = transport.send(mate('first@example.com', 'en'))
  await until('the first call reaches SES', () => proxy.requests.length === 1)
  const names = ['one@example.com', 'refused@example.com', 'not an address', 'two@example.com']
  const sends = names.map(async (to) => await settle(transport.send(mate(to, 'en'))))
  proxy.release()
  await first
  const settled = await Promise.all(sends)
  t.same(settled.map(({ kind }) => kind), ['sent', 'rejected', 'unknown', 'sent'],
    'SES refused one destination (MESSAGE_REJECTED) and the emulator failed another (FAILED); their batch-mates were sent')
  t.same(proxy.requests.slice(1), [{ bulk: true, to: names }], 'all four in one call')
  const [one, , , two] = settled.map(({ messageId }) => messageId)
  t.ok(typeof one === 'string' && typeof two === 'string' && one !== two, `each sent destination resolves with its own MessageId (${String(one)}, ${String(two)})`)
  t.match(settled[1]?.message, /MESSAGE_REJECTED/, 'the error names the destination\'s status')
  t.match(settled[2]?.message, /FAILED/)
  t.notMatch(settled[1]?.message, 'refused@example.com', 'never the address')
})

t.test('batching: a message waits for its batch at most batchWaitMs, never for the call in flight', async (t) => {
  const base = await startSesLocal(t)
  const proxy = await startSesProxy(t, base)
  const transport = transportFor(proxy.endpoint, { timeoutMs: 30_000 })
  t.teardown(() => transport.close())

  proxy.hold((request) => request.to[0] === 'first@example.com')
  const first = transport.send(mate('first@example.com', 'en'))
  await until('the first call reaches SES', () => proxy.requests.length === 1)
  let second = 'waiting'
  const sending = transport.send(mate('second@example.com', 'en')).then(() => { second = 'sent' })
  // The first call stays in flight throughout: the second leaves when its own wait ends.
  await until('the second message is accepted while the first call is still held', () => second === 'sent')
  t.same(proxy.requests, [{ bulk: false, to: ['first@example.com'] }, { bulk: false, to: ['second@example.com'] }], 'alone in its batch, it left as SendEmail')
  proxy.release()
  await first
  await sending
})

t.test('batching: a SendBulkEmail refused as a whole sends each message again on its own', async (t) => {
  // A malformed request, and credentials that allow SendEmail only (IAM's answer, outside the SES model).
  for (const failBulk of [{ status: 400, type: 'BadRequestException' }, { status: 403, type: 'AccessDeniedException' }]) {
    await t.test(failBulk.type, async (t) => {
      await refusedAsAWhole(t, failBulk)
    })
  }
})

async function refusedAsAWhole (t: Test, failBulk: { status: number, type: string }): Promise<void> {
  const base = await startSesLocal(t)
  const proxy = await startSesProxy(t, base)
  const transport = transportFor(proxy.endpoint, { batchWaitMs: 60_000 })
  t.teardown(() => transport.close())
  proxy.failBulk = failBulk
  proxy.refuse.add('refused@example.com')

  proxy.hold((request) => request.to[0] === 'first@example.com')
  const first = transport.send(mate('first@example.com', 'en'))
  await until('the first call reaches SES', () => proxy.requests.length === 1)
  const names = ['one@example.com', 'refused@example.com', 'two@example.com']
  const sends = names.map((to) => outcome(transport.send(mate(to, 'en'))))
  proxy.release()
  await first
  t.same(await Promise.all(sends), ['sent', 'rejected', 'sent'], 'only the refused address answers for itself')
  t.same(proxy.requests.slice(1, 2), [{ bulk: true, to: names }], 'the batch went first')
  t.same(proxy.requests.slice(2).map((request) => request.to[0]).sort(), [...names].sort(), 'then each message alone')
  t.ok(proxy.requests.slice(2).every((request) => !request.bulk))
}

t.test('batching: a failing SendBulkEmail fails over message by message, as a failing SendEmail does', async (t) => {
  const base = await startSesLocal(t)
  const proxy = await startSesProxy(t, base)
  const smtp = await startSmtp(t)
  // Room for the SDK's retry of a server fault before the deadline.
  const ses = transportFor(proxy.endpoint, { timeoutMs: 10_000, batchWaitMs: 60_000 })
  const relay = new SmtpTransport({ url: `smtp://127.0.0.1:${smtp.port}?tls=off`, timeoutMs: 10_000 })
  const failedOver: string[] = []
  const mail = new FailoverTransport([ses, relay], { failures: 2, openMs: 60_000 }, {
    failedOver (from, kind) { failedOver.push(`${from}:${kind}`) },
    skipped () {}
  })
  t.teardown(() => mail.close())
  proxy.failBulk = { status: 500, type: 'InternalServiceErrorException' }

  proxy.hold((request) => request.to[0] === 'first@example.com')
  const first = mail.send(mate('first@example.com', 'en'))
  await until('the first call reaches SES', () => proxy.requests.length === 1)
  const sends = ['one@example.com', 'two@example.com'].map(async (to) => await mail.send(mate(to, 'en')))
  proxy.release()
  t.equal((await first).provider, 'ses', 'the lone message went through SES')
  const relayed = await Promise.all(sends)
  t.same(relayed.map(({ provider }) => provider), ['smtp', 'smtp'], 'each message of the failed call went on to SMTP')
  t.ok(relayed.every(({ messageId }) => typeof messageId === 'string' && /^<.+@.+>$/.test(messageId)), `with the Message-ID the relay was given (${String(relayed[0]?.messageId)})`)
  t.same(failedOver, ['ses:provider', 'ses:provider'], 'one failover per message')
  t.same(smtp.received.map((received) => received.to !== undefined && !Array.isArray(received.to) ? received.to.text : '').sort(), ['one@example.com', 'two@example.com'])
  t.equal(mail.circuits().ses, 'open', 'the breaker counted each message\'s failure')
})

t.test('the SDK step the transport removes (its logger, which filters every input) is still the one named loggerMiddleware', async (t) => {
  const client = new sesModel.SESv2Client({ region: 'eu-west-1' })
  t.teardown(() => { client.destroy() })
  t.ok(client.middlewareStack.identify().some((step) => step.startsWith('loggerMiddleware ')), 'present in a new client')
  t.ok(client.middlewareStack.remove('loggerMiddleware'), 'removed by that name')
})
