import t, { type Test } from 'tap'
import type { AddressObject } from 'mailparser'
import { freePort } from '../../../support/redis.js'
import { deliveryFailure, startSilentPeer, startSmtp, startTcpPeer } from '../../../support/mail-peers.js'
import { SmtpTransport } from '../../../../lib/mail/delivery/smtp-transport.js'
import { composeVerificationMessage } from '../../../../lib/mail/templating/message.js'
import type { OutgoingMessage } from '../../../../lib/mail/delivery/transport.js'

const TIMEOUT_MS = 1000
/**
 * A stall guard over the timeout, not a measurement: without the deadline a peer that never
 * greets would hold a send for nodemailer's 30 s greeting timeout, and the kind of each failure
 * says which bound ended it. Ten times the timeout: no machine's speed decides.
 */
const SLACK_MS = 9000
const CODE = '482910'

function message (): OutgoingMessage {
  return composeVerificationMessage({
    to: 'person@example.com',
    from: 'Acme Café <no-reply@acme.test>',
    replyTo: 'support@acme.test',
    brand: 'Acme Café',
    code: CODE,
    ttlSeconds: 600,
    locale: 'fr',
    tags: { tenant: 'acme' }
  })
}

/**
 * A TCP peer that speaks SMTP, slowly: every reply comes after `delayMs`, which is under each
 * of the transport's per-phase timeouts but adds up, over a conversation, to more than the
 * per-send deadline.
 */
async function startTricklingPeer (t: Test, delayMs: number): Promise<number> {
  return await startTcpPeer(t, (socket) => {
    const reply = (line: string): void => {
      setTimeout(() => { if (!socket.destroyed) socket.write(`${line}\r\n`) }, delayMs)
    }
    reply('220 slow.test ESMTP')
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => {
      for (const command of chunk.split('\r\n').filter((line) => line !== '')) {
        reply(command.toUpperCase().startsWith('DATA') ? '354 go ahead' : '250 ok')
      }
    })
  })
}

/** The transport under test; closed when the test ends, before the servers it talks to. */
function transport (t: Test, url: string, pool?: boolean): SmtpTransport {
  const smtp = new SmtpTransport({ url, timeoutMs: TIMEOUT_MS, pool })
  t.teardown(() => smtp.close())
  return smtp
}

function addresses (field: AddressObject | AddressObject[] | undefined): string[] {
  const list = field === undefined ? [] : Array.isArray(field) ? field : [field]
  return list.flatMap((entry) => entry.value.map((address) => address.address ?? ''))
}

t.test('delivers the composed message, reusing the pooled connection', async (t) => {
  const peer = await startSmtp(t)
  const smtp = transport(t, `smtp://127.0.0.1:${peer.port}?tls=off`)
  t.equal(await smtp.ready(), true)

  const outgoing = message()
  await smtp.send(outgoing)
  await smtp.send(outgoing)

  t.equal(peer.received.length, 2)
  t.equal(peer.connections(), 1, 'the second send reused the pooled connection')
  const [mail] = peer.received
  if (mail === undefined) return
  t.same(addresses(mail.to), ['person@example.com'], 'to')
  t.equal(mail.from?.value[0]?.address, 'no-reply@acme.test', 'from address')
  t.equal(mail.from?.value[0]?.name, 'Acme Café', 'from display name survives encoding')
  t.same(addresses(mail.replyTo), ['support@acme.test'], 'reply-to')
  t.equal(mail.subject, 'Votre code de vérification Acme Café', 'subject, decoded')
  t.notMatch(mail.subject ?? '', CODE, 'no code in the subject')
  t.equal(mail.text, outgoing.text, 'text part')
  t.match(mail.text, CODE, 'code in the text')
  t.equal(typeof mail.html === 'string' ? mail.html.trim() : mail.html, outgoing.html.trim(), 'html part')
  t.match(mail.html, `>${CODE}<`, 'code in the html')

  await smtp.close()
  t.equal(await smtp.ready(), false, 'not ready once closed')
  const closed = await deliveryFailure(() => smtp.send(outgoing))
  t.equal(closed.error.kind, 'connection', 'send after close fails')
})

t.test('the message leaves whole: envelope, headers, and parts that survive dots, equals signs and long lines', async (t) => {
  const envelope: { from: string[], to: string[] } = { from: [], to: [] }
  const peer = await startSmtp(t, {
    onMailFrom (address, _session, callback) { envelope.from.push(address.address); callback() },
    onRcptTo (address, _session, callback) { envelope.to.push(address.address); callback() }
  })
  const smtp = transport(t, `smtp://127.0.0.1:${peer.port}?tls=off`)
  const outgoing: OutgoingMessage = {
    ...message(),
    // A line that is a lone dot would end the data; '=' starts a quoted-printable escape.
    text: `Code ${CODE}\n.\n..leading dots\n2 + 2 = 4 =3D\n${'long line é '.repeat(40)}\nfin`,
    html: `<p>${CODE}</p>\n.\n<p style="a=b">${'x'.repeat(300)}</p>`,
    // A line break in a subject is never a second header.
    subject: 'Votre code\r\nBcc: intruder@evil.test'
  }
  const messageId = await smtp.send(outgoing)
  t.same(envelope, { from: ['no-reply@acme.test'], to: ['person@example.com'] }, 'the envelope names the sender\'s and the recipient\'s addresses')
  const [mail] = peer.received
  if (mail === undefined) return
  t.equal(mail.text, outgoing.text, 'text part, byte for byte')
  t.equal(typeof mail.html === 'string' ? mail.html.trim() : mail.html, outgoing.html.trim(), 'html part')
  t.equal(mail.subject, 'Votre code Bcc: intruder@evil.test', 'the line break became a space')
  t.equal(mail.bcc, undefined, 'no Bcc header')
  t.equal(mail.messageId, messageId, 'the Message-ID sent is the id send() reports')
  t.match(mail.messageId, /^<[\w-]+@acme\.test>$/, 'at the sender\'s domain')
  t.ok(mail.headers.has('date'), 'Date')
  t.equal(mail.headers.get('mime-version'), '1.0')
})

t.test('delivers without a pool too', async (t) => {
  const peer = await startSmtp(t)
  const smtp = transport(t, `smtp://127.0.0.1:${peer.port}?tls=off`, false)
  await smtp.send(message())
  await smtp.send(message())
  t.equal(peer.received.length, 2)
  t.equal(peer.connections(), 2, 'one connection per message')
})

t.test('authenticates with the credentials of the URL', async (t) => {
  const peer = await startSmtp(t, {
    authOptional: false,
    allowInsecureAuth: true,
    onAuth (auth, _session, callback) {
      if (auth.username === 'mailer' && auth.password === 'p@ss word') {
        callback(null, { user: auth.username })
      } else {
        callback(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }))
      }
    }
  })

  // Percent-encoded in the URL, decoded before it reaches the server.
  const good = transport(t, `smtp://mailer:p%40ss%20word@127.0.0.1:${peer.port}?tls=off`)
  await good.send(message())
  t.equal(peer.received.length, 1, 'accepted with the right password')

  const bad = transport(t, `smtp://mailer:wrong-secret@127.0.0.1:${peer.port}?tls=off`)
  const { error } = await deliveryFailure(() => bad.send(message()))
  t.equal(error.kind, 'rejected', 'a wrong password is a rejection')
  t.notMatch(error.message, 'wrong-secret', 'no password in the error')

  const anonymous = transport(t, `smtp://127.0.0.1:${peer.port}?tls=off`)
  const refused = await deliveryFailure(() => anonymous.send(message()))
  t.equal(refused.error.kind, 'rejected', 'no credentials where AUTH is required')
  t.equal(peer.received.length, 1)
})

t.test('SMTP replies map to delivery failure kinds', async (t) => {
  for (const { responseCode, kind } of [
    { responseCode: 550, kind: 'rejected' },
    { responseCode: 553, kind: 'rejected' },
    { responseCode: 451, kind: 'throttled' },
    { responseCode: 452, kind: 'throttled' },
    { responseCode: 450, kind: 'throttled' }
  ] as const) {
    const peer = await startSmtp(t, {
      onRcptTo (address, _session, callback) {
        // Real servers quote the address; it must not reach the DeliveryError.
        callback(Object.assign(new Error(`<${address.address}>: Recipient address rejected`), { responseCode }))
      }
    })
    const smtp = transport(t, `smtp://127.0.0.1:${peer.port}?tls=off`)
    const { error } = await deliveryFailure(() => smtp.send(message()))
    t.equal(error.kind, kind, `${responseCode} -> ${kind}`)
    t.match(error.message, String(responseCode), `${responseCode}: carries the reply code`)
    t.notMatch(error.message, 'person@example.com', `${responseCode}: no recipient in the message`)
    t.notMatch(error.message, CODE, `${responseCode}: no code in the message`)
    t.equal(error.cause, undefined, `${responseCode}: the nodemailer error is not attached`)
    t.equal(peer.received.length, 0)
  }

  const busy = await startSmtp(t, {
    onConnect (_session, callback) {
      callback(Object.assign(new Error('Too many connections, try later'), { responseCode: 421 }))
    }
  })
  const smtp = transport(t, `smtp://127.0.0.1:${busy.port}?tls=off`)
  const { error } = await deliveryFailure(() => smtp.send(message()))
  t.equal(error.kind, 'throttled', '421 at the greeting is throttling')
})

t.test('TLS is required unless the URL says tls=off', async (t) => {
  // The peer offers no STARTTLS: a plain smtp:// URL must refuse to send in clear text.
  const peer = await startSmtp(t)
  const smtp = transport(t, `smtp://127.0.0.1:${peer.port}`)
  const { error } = await deliveryFailure(() => smtp.send(message()))
  t.equal(error.kind, 'connection')
  t.equal(peer.received.length, 0, 'nothing was sent in clear text')
})

t.test('a closed port fails fast as a connection error', async (t) => {
  const port = await freePort()
  const smtp = transport(t, `smtp://127.0.0.1:${port}?tls=off`)
  const { error, elapsed } = await deliveryFailure(() => smtp.send(message()))
  t.equal(error.kind, 'connection')
  t.ok(elapsed < TIMEOUT_MS + SLACK_MS, `failed in ${Math.round(elapsed)} ms`)
})

t.test('a peer that accepts and never greets times out within the bound', async (t) => {
  for (const pool of [true, false]) {
    const port = await startSilentPeer(t)
    const smtp = transport(t, `smtp://127.0.0.1:${port}?tls=off`, pool)
    const { error, elapsed } = await deliveryFailure(() => smtp.send(message()))
    t.equal(error.kind, 'timeout', `pool=${pool}`)
    t.ok(elapsed >= TIMEOUT_MS - 100, `pool=${pool}: did not give up early (${Math.round(elapsed)} ms)`)
    t.ok(elapsed < TIMEOUT_MS + SLACK_MS, `pool=${pool}: failed in ${Math.round(elapsed)} ms`)
  }
})

t.test('a peer that answers every command slowly hits the per-send deadline', async (t) => {
  for (const pool of [true, false]) {
    const port = await startTricklingPeer(t, TIMEOUT_MS * 0.6)
    const smtp = transport(t, `smtp://127.0.0.1:${port}?tls=off`, pool)
    const { error, elapsed } = await deliveryFailure(() => smtp.send(message()))
    t.equal(error.kind, 'timeout', `pool=${pool}`)
    t.ok(elapsed < TIMEOUT_MS + SLACK_MS, `pool=${pool}: failed in ${Math.round(elapsed)} ms`)
  }
})

t.test('URL validation happens at construction and never echoes the URL', async (t) => {
  const cases = [
    'http://127.0.0.1:25',
    'not a url',
    'smtp://127.0.0.1:25?tls=on',
    'smtp://127.0.0.1:25?tls.rejectUnauthorized=false',
    'smtps://user:hunter2@127.0.0.1:465?tls=off',
    'smtp://user:hunter2@127.0.0.1:25?debug=true'
  ]
  for (const url of cases) {
    let thrown: unknown
    try {
      void new SmtpTransport({ url, timeoutMs: TIMEOUT_MS })
    } catch (error) {
      thrown = error
    }
    t.type(thrown, TypeError, `${url}: refused`)
    t.notMatch(String(thrown), 'hunter2', `${url}: no password in the error`)
  }
  t.throws(() => new SmtpTransport({ url: 'smtp://127.0.0.1:25', timeoutMs: 0 }), RangeError)
})
