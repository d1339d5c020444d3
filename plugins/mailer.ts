import type { Writable } from 'node:stream'
import fp from 'fastify-plugin'
import { Mailer } from '../lib/mail/mailer.js'

declare module 'fastify' {
  interface FastifyInstance {
    mailer: Mailer
  }
}

export interface MailerOptions {
  /** Where the log transport prints messages (stdout unless a test captures it). */
  mailLog?: Writable
}

/** The mailer of lib/mail/mailer.ts over the configured transport, closed on close. */
export default fp<MailerOptions>(async function mailerPlugin (fastify, options) {
  const { mailSendSeconds } = fastify.metrics
  const mailer = new Mailer(fastify.config, fastify.backend.sandboxInbox, options.mailLog ?? process.stdout, (transport, seconds, result) => {
    mailSendSeconds.observe({ transport, result }, seconds)
  })
  fastify.decorate('mailer', mailer)
  fastify.addHook('onClose', async () => { await mailer.close() })
}, { name: 'mailer', dependencies: ['config', 'backend', 'metrics'], fastify: '5.x' })
