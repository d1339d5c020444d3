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
  const { metrics, log } = fastify
  const mailer = new Mailer(fastify.config, fastify.backend.sandboxInbox, options.mailLog ?? process.stdout, {
    failedOver (from, kind) {
      metrics.mailFailovers.inc({ from, kind })
      log.warn({ transport: from, kind }, 'mail provider failed; trying the next one')
    },
    skipped (transport) {
      metrics.mailCircuitSkips.inc({ transport })
    }
  }, (transport, seconds, result) => {
    metrics.mailSendSeconds.observe({ transport, result }, seconds)
  })
  fastify.decorate('mailer', mailer)
  fastify.addHook('onClose', async () => { await mailer.close() })
}, { name: 'mailer', dependencies: ['config', 'backend', 'metrics'], fastify: '5.x' })
