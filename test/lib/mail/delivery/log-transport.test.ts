import t from 'tap'
import { Writable } from 'node:stream'
import { LogTransport } from '../../../../lib/mail/delivery/log-transport.js'
import type { OutgoingMessage } from '../../../../lib/mail/delivery/transport.js'

function message (to: string): OutgoingMessage {
  return { to, from: 'codes@example.com', subject: 'Your code', text: 'Your code is 123456\n\n', html: '<p>123456</p>', tags: {} }
}

class Recorder extends Writable {
  readonly writes: string[] = []
  constructor (readonly failWith: Error | null = null) {
    super()
  }

  override _write (chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.writes.push(chunk.toString())
    setTimeout(() => { callback(this.failWith) }, 10)
  }
}

t.test('messages sent together go out in one write, each send resolving once it is written', async (t) => {
  const out = new Recorder()
  const transport = new LogTransport(out)
  let settled = 0
  const sends = ['a@example.com', 'b@example.com', 'c@example.com'].map(async (to) => { await transport.send(message(to)); settled++ })
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(settled, 0, 'nothing resolves before the write has completed')
  await Promise.all(sends)
  t.equal(out.writes.length, 1)
  const blocks = (out.writes[0] ?? '').split('----- email-otp log mailer: this message was NOT sent -----\n').slice(1)
  t.strictSame(blocks.map((block) => /^To: (\S+)$/m.exec(block)?.[1]), ['a@example.com', 'b@example.com', 'c@example.com'], 'whole messages, in order')
  t.match(blocks[0], /^To: a@example\.com\nFrom: codes@example\.com\nSubject: Your code\n\nYour code is 123456\n-{59}\n$/)

  await transport.send(message('d@example.com'))
  t.equal(out.writes.length, 2, 'a later message gets its own write')
})

t.test('a failed write fails every send of its batch', async (t) => {
  const out = new Recorder(new Error('disk full'))
  // The stream's owner hears its errors; the sends learn of them through the write callback.
  out.on('error', () => {})
  const transport = new LogTransport(out)
  const results = await Promise.allSettled([transport.send(message('a@example.com')), transport.send(message('b@example.com'))])
  t.strictSame(results.map((result) => result.status), ['rejected', 'rejected'])
})

t.test('a batch mixing characters beyond Latin-1 with plain messages prints each one exactly', async (t) => {
  const out = new Recorder()
  const transport = new LogTransport(out)
  const plain = { ...message('a@example.com'), text: `${'x'.repeat(70_000)} 123456\n` }
  const french = { ...message('b@example.com'), subject: 'Votre code', text: 'Votre code de vérification est\u00a0: 654321 — l\u2019équipe\n' }
  await Promise.all([transport.send(plain), transport.send(french)])
  t.equal(out.writes.length, 1, 'one write')
  const written = out.writes[0] ?? ''
  t.ok(written.includes(`${'x'.repeat(70_000)} 123456\n---`), 'the long message, whole')
  t.ok(written.includes('Subject: Votre code\n\nVotre code de vérification est\u00a0: 654321 — l\u2019équipe\n---'), 'the other message, its characters intact')
})
