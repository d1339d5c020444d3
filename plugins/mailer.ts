import type { Writable } from 'node:stream'
import fp from 'fastify-plugin'
import { LogTransport } from '../lib/mail/log-transport.js'
import type { MailTransport, OutgoingMessage } from '../lib/mail/transport.js'

export interface Mailer {
  /** The transport live mail leaves through. */
  readonly transport: string
  /** Sends live mail through the configured transport; sandbox mail never leaves the service. */
  send (message: OutgoingMessage, mode: 'live' | 'test'): Promise<void>
  ready (): Promise<boolean>
}

declare module 'fastify' {
  interface FastifyInstance {
    mailer: Mailer
  }
}

export interface MailerOptions {
  /** Where the log transport prints messages (stdout unless a test captures it). */
  mailLog?: Writable
}

export default fp<MailerOptions>(async function mailerPlugin (fastify, options) {
  const logTransport = new LogTransport(options.mailLog ?? process.stdout)
  const live: MailTransport = logTransport
  // Sandbox keys must never reach a real provider, whatever MAIL_TRANSPORT says.
  const sandbox: MailTransport = logTransport

  const mailer: Mailer = {
    transport: live.name,
    async send (message, mode) {
      await (mode === 'live' ? live : sandbox).send(message)
    },
    async ready () {
      return await live.ready()
    }
  }
  fastify.decorate('mailer', mailer)
  fastify.addHook('onClose', async () => { await live.close() })
}, { name: 'mailer', dependencies: ['config'], fastify: '5.x' })
