import t from 'tap'
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { once } from 'node:events'
import { freePort } from '../../support/redis.js'
import { deliveryFailure, startSesLocal, startSilentPeer, type StoredEmail } from '../../support/mail-peers.js'
import { SesTransport } from '../../../lib/mail/ses-transport.js'
import { composeVerificationMessage } from '../../../lib/mail/compose.js'
import type { OutgoingMessage } from '../../../lib/mail/transport.js'

const CREDENTIALS = { accessKeyId: 'x', secretAccessKey: 'x' }
const TIMEOUT_MS = 1000
/** Generous slack over the timeout: CI machines are noisy. */
const SLACK_MS = 3000

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

function transportFor (endpoint: string, options: { timeoutMs?: number, configurationSet?: string } = {}): SesTransport {
  return new SesTransport({
    timeoutMs: options.timeoutMs ?? TIMEOUT_MS,
    configurationSet: options.configurationSet,
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
    await transport.send(outgoing)

    const store = await (await fetch(`${base}/store`)).json() as { emails: StoredEmail[] }
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

t.test('SES error responses map to delivery failure kinds', async (t) => {
  const cases = [
    { status: 400, type: 'MessageRejected', kind: 'rejected' },
    { status: 400, type: 'MailFromDomainNotVerifiedException', kind: 'rejected' },
    { status: 400, type: 'AccountSuspendedException', kind: 'rejected' },
    { status: 400, type: 'SendingPausedException', kind: 'rejected' },
    { status: 400, type: 'BadRequestException', kind: 'rejected' },
    { status: 429, type: 'TooManyRequestsException', kind: 'throttled' },
    { status: 400, type: 'LimitExceededException', kind: 'throttled' },
    { status: 500, type: 'InternalServiceErrorException', kind: 'unknown' }
  ] as const
  for (const { status, type, kind } of cases) {
    // SES quotes the failing identity in its messages: it must not reach the DeliveryError.
    const peer = await startFakeSes(status, { 'x-amzn-errortype': type, 'x-amzn-requestid': 'req-123' }, {
      message: 'Email address is not verified: person@example.com'
    })
    // The SDK retries throttling after a backoff of up to a second: leave room for it, so
    // that the deadline does not turn the answer into a timeout.
    const transport = transportFor(peer.endpoint, { timeoutMs: 5000 })
    const { error } = await deliveryFailure(() => transport.send(message()))
    await transport.close()
    t.equal(error.kind, kind, `${type} -> ${kind}`)
    t.match(error.message, type, `${type}: names the exception`)
    t.match(error.message, 'req-123', `${type}: carries the request id`)
    t.notMatch(error.message, 'person@example.com', `${type}: no recipient in the message`)
    t.notMatch(error.message, '482910', `${type}: no code in the message`)
    t.equal(error.cause, undefined, `${type}: the SDK error is not attached`)
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
  // Each attempt stays under the per-attempt timeout, then fails with a retryable 503; the
  // second attempt would end past the deadline, which must cut it short.
  const timeoutMs = 2000
  const peer = await startFakeSes(503, { 'x-amzn-errortype': 'InternalServiceErrorException' }, {}, timeoutMs * 0.6)
  const transport = transportFor(peer.endpoint, { timeoutMs })
  t.teardown(() => transport.close())
  const { error, elapsed } = await deliveryFailure(() => transport.send(message()))
  t.equal(error.kind, 'timeout')
  t.equal(peer.requests.length, 2, 'the SDK retried once (maxAttempts 2)')
  t.ok(elapsed < timeoutMs + SLACK_MS, `failed in ${Math.round(elapsed)} ms`)
})
