import { once } from 'node:events'
import { createServer } from 'node:http'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { bearer, buildApp, readiness, writeTenants } from '../helper.js'
import { sesStore, startSesProcess, startSmtp } from '../support/mail-peers.js'
import { freePort } from '../support/redis.js'

// The SDK reads credentials from its standard chain; the emulator accepts any.
process.env.AWS_ACCESS_KEY_ID = 'test'
process.env.AWS_SECRET_ACCESS_KEY = 'test'

const codeIn = (text: string | undefined): string => /\b(\d{6})\b/.exec(text ?? '')?.[1] ?? ''

/** An HTTP peer on loopback that answers every request 500, as SES does in an outage; counts them. */
async function startFailingSes (t: Test): Promise<{ endpoint: string, requests: () => number, bodies: string[] }> {
  let requests = 0
  const bodies: string[] = []
  const server = createServer((request, response) => {
    requests++
    let body = ''
    request.on('data', (chunk: Buffer) => { body += chunk.toString() })
    request.on('end', () => { bodies.push(body) })
    response.writeHead(500, { 'content-type': 'application/json', 'x-amzn-errortype': 'InternalServiceErrorException:http://internal.amazon.com/coral/com.amazonaws.sesv2/' })
    response.end('{"message":"internal"}')
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => { server.closeAllConnections(); server.close(); await once(server, 'close') })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  return { endpoint: `http://127.0.0.1:${address.port}`, requests: () => requests, bodies }
}

async function metric (app: FastifyInstance, name: string, labels: Record<string, string>): Promise<number> {
  const found = (await app.metrics.registry.getSingleMetric(name)?.get())?.values.find((value) =>
    Object.entries(labels).every(([label, expected]) => value.labels[label] === expected))
  return found?.value ?? 0
}

async function dispatchAndVerify (t: Test, app: FastifyInstance, key: string, smtp: Awaited<ReturnType<typeof startSmtp>>, email: string): Promise<string> {
  const before = smtp.received.length
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })
  t.equal(sent.statusCode, 200, `${email}: answered 200`)
  t.equal(smtp.received.length, before + 1, `${email}: the mail arrived through SMTP`)
  const code = codeIn(smtp.received.at(-1)?.text)
  const verified = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(key), payload: { requestId: sent.json().data.requestId, userGuess: code } })
  t.equal(verified.statusCode, 200, `${email}: the code from the SMTP mail verifies`)
  return sent.json().data.requestId
}

t.test('ses,smtp: with SES up the mail goes through SES; once the emulator is killed, through SMTP', async (t) => {
  const ses = await startSesProcess(t)
  const smtp = await startSmtp(t)
  const { path, keys } = writeTenants(t)
  const { app, logs } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'ses,smtp', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses.base, SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`, MAIL_FROM: 'no-reply@otp.test', MAIL_TIMEOUT_MS: '3000' })
  t.same((await readiness(app)).body.checks.mailer, { ok: true, kind: 'ses,smtp' }, '/readyz names the list')

  const first = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'kim@example.com' } })
  t.equal(first.statusCode, 200)
  t.equal((await sesStore(ses.base)).length, 1, 'the primary took it')
  t.equal(smtp.received.length, 0, 'the secondary was not used')
  t.equal(await metric(app, 'email_otp_mail_sent_total', { transport: 'ses' }), 1)

  await ses.kill()
  await dispatchAndVerify(t, app, keys.acmeLive, smtp, 'lu@example.com')
  t.equal(await metric(app, 'email_otp_mail_failovers_total', { from: 'ses', kind: 'connection' }), 1, 'the failover is counted with its cause')
  t.equal(await metric(app, 'email_otp_mail_sent_total', { transport: 'smtp' }), 1, 'the delivering provider is counted')
  t.match(logs.text, /"transport":"smtp"[^\n]*"msg":"code dispatched"/, 'the log names the delivering provider')
  t.notMatch(logs.text, /lu@example\.com/, 'never the address')
  t.equal((await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).json().data.live.used, 2, 'both delivered dispatches were charged')
})

t.test('ses,smtp: SES answering 500 fails over to SMTP; a rejection does not', async (t) => {
  const ses = await startFailingSes(t)
  const smtp = await startSmtp(t)
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'ses,smtp', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses.endpoint, SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`, MAIL_FROM: 'no-reply@otp.test' })
  const requestId = await dispatchAndVerify(t, app, keys.acmeLive, smtp, 'ola@example.com')
  t.ok(ses.requests() >= 1, 'SES was tried first')
  const tags = (JSON.parse(ses.bodies[0] ?? '{}') as { EmailTags?: Array<{ Name: string, Value: string }> }).EmailTags
  t.same(tags, [{ Name: 'tenant', Value: 'acme' }, { Name: 'mode', Value: 'live' }, { Name: 'requestId', Value: requestId }], 'SES gets the tags its events are mapped by, requestId included, never the address')
  t.equal(await metric(app, 'email_otp_mail_failovers_total', { from: 'ses', kind: 'provider' }), 1, 'a provider 5xx fails over')

  // smtp first this time: a relay that refuses the recipient with 550.
  const refusing = await startSmtp(t, {
    onRcptTo (_address, _session, callback) { callback(Object.assign(new Error('no such user'), { responseCode: 550 })) }
  })
  const { app: rejecting } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'smtp,ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses.endpoint, SMTP_URL: `smtp://127.0.0.1:${refusing.port}?tls=off`, MAIL_FROM: 'no-reply@otp.test' })
  const before = ses.requests()
  const refused = await rejecting.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'gone@example.com' } })
  t.equal(refused.statusCode, 502, 'a rejected address answers 502')
  t.equal(ses.requests(), before, 'and is not tried on the next provider')
  t.equal(await metric(rejecting, 'email_otp_delivery_failures_total', { kind: 'rejected' }), 1)
})

t.test('ses,smtp: both down → 502, nothing charged, delivery failed once', async (t) => {
  const closed = await freePort()
  const ses = await startFailingSes(t)
  const { path, keys } = writeTenants(t)
  const { app, logs } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'ses,smtp', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses.endpoint, SMTP_URL: `smtp://127.0.0.1:${closed}?tls=off`, MAIL_FROM: 'no-reply@otp.test' })
  const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'pat@example.com' } })
  t.equal(answer.statusCode, 502)
  t.equal(answer.json().code, 'DELIVERY_FAILED')
  t.equal((await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).json().data.live.used, 0, 'nothing charged')
  t.equal(await metric(app, 'email_otp_mail_failovers_total', { from: 'ses', kind: 'provider' }), 1)
  t.equal(await metric(app, 'email_otp_delivery_failures_total', { kind: 'connection' }), 1, 'the failure counted once, with the last provider\'s cause')
  t.equal(logs.text.match(/"msg":"delivery failed"/g)?.length, 1, 'one delivery failure for the dispatch')
})

t.test('circuit breaker: once the primary failed MAIL_BREAKER_FAILURES times in a row it is not tried while open', async (t) => {
  const ses = await startFailingSes(t)
  const smtp = await startSmtp(t)
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'ses,smtp', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses.endpoint, SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`, MAIL_FROM: 'no-reply@otp.test', MAIL_BREAKER_FAILURES: '2', MAIL_BREAKER_OPEN_SECONDS: '600' })
  await dispatchAndVerify(t, app, keys.acmeLive, smtp, 'a1@example.com')
  t.same(app.mailer.circuits(), { ses: 'closed', smtp: 'closed' }, 'one failure leaves the circuit closed')
  await dispatchAndVerify(t, app, keys.acmeLive, smtp, 'a2@example.com')
  t.same(app.mailer.circuits(), { ses: 'open', smtp: 'closed' }, 'the second in a row opens it')
  const tried = ses.requests()
  for (const email of ['a3@example.com', 'a4@example.com', 'a5@example.com']) await dispatchAndVerify(t, app, keys.acmeLive, smtp, email)
  t.equal(ses.requests(), tried, 'while open, the primary gets no request: a dispatch costs only the secondary')
  t.equal(await metric(app, 'email_otp_mail_circuit_skips_total', { transport: 'ses' }), 3)
  t.equal(await metric(app, 'email_otp_mail_failovers_total', { from: 'ses', kind: 'provider' }), 2, 'skips are not failovers')
})
