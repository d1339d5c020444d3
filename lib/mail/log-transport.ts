import type { Writable } from 'node:stream'
import type { MailTransport, OutgoingMessage } from './transport.js'

/**
 * Development transport: prints the message instead of sending it, so a developer can copy
 * the code from the console. It writes to its own stream, apart from the JSON request log,
 * which never carries codes or addresses.
 */
export class LogTransport implements MailTransport {
  readonly name = 'log'
  readonly #out: Writable

  constructor (out: Writable) {
    this.#out = out
  }

  async send (message: OutgoingMessage): Promise<void> {
    this.#out.write([
      '----- email-otp log mailer: this message was NOT sent -----',
      `To: ${message.to}`,
      `From: ${message.from}`,
      `Subject: ${message.subject}`,
      '',
      message.text.trimEnd(),
      '-----------------------------------------------------------',
      ''
    ].join('\n'))
  }

  async ready (): Promise<boolean> {
    return this.#out.writable
  }

  async close (): Promise<void> {}
}
