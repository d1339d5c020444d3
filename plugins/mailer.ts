import type { Writable } from 'node:stream'
import fp from 'fastify-plugin'
import type { KeyMode } from '../lib/tenants/api-keys.js'
import { LogTransport } from '../lib/mail/log-transport.js'
import { SesTransport } from '../lib/mail/ses-transport.js'
import { SmtpTransport } from '../lib/mail/smtp-transport.js'
import type { MailTransport, OutgoingMessage } from '../lib/mail/transport.js'
import { MemorySandboxInbox, RedisSandboxInbox, type SandboxInbox } from '../lib/sandbox/inbox.js'
import { simulateDelivery } from '../lib/sandbox/simulator.js'
import type { Config } from '../lib/config.js'

export interface DeliveryContext {
  mode: KeyMode
  tenantId: string
  requestId: string
  /** Kept only in the sandbox inbox, never for live mail. */
  code: string
}

export interface Mailer {
  /** The transport live mail leaves through. */
  readonly transport: string
  readonly sandboxInbox: SandboxInbox
  /**
   * Live mail goes through the configured transport. Sandbox mail never leaves the service:
   * it plays the simulator's reserved recipients, then lands in the sandbox inbox.
   */
  send (message: OutgoingMessage, context: DeliveryContext): Promise<void>
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

function liveTransport (config: Config, log: LogTransport): MailTransport {
  switch (config.mailTransport) {
    case 'ses':
      return new SesTransport({
        timeoutMs: config.mailTimeoutMs,
        ...(config.ses.region === null ? {} : { region: config.ses.region }),
        ...(config.ses.endpoint === null ? {} : { endpoint: config.ses.endpoint }),
        ...(config.ses.configurationSet === null ? {} : { configurationSet: config.ses.configurationSet })
      })
    case 'smtp':
      // parseConfig guarantees SMTP_URL for this transport.
      return new SmtpTransport({ url: config.smtpUrl ?? '', timeoutMs: config.mailTimeoutMs })
    case 'log':
      return log
  }
}

export default fp<MailerOptions>(async function mailerPlugin (fastify, options) {
  const { config } = fastify
  const log = new LogTransport(options.mailLog ?? process.stdout)
  const live = liveTransport(config, log)
  const sandboxInbox: SandboxInbox = fastify.redis === null ? new MemorySandboxInbox() : new RedisSandboxInbox(fastify.redis)

  const mailer: Mailer = {
    transport: live.name,
    sandboxInbox,
    async send (message, context) {
      if (context.mode === 'live') {
        await live.send(message)
        return
      }
      await simulateDelivery(message.to, config.mailTimeoutMs)
      await sandboxInbox.add(context.tenantId, {
        requestId: context.requestId,
        to: message.to,
        from: message.from,
        subject: message.subject,
        text: message.text,
        html: message.html,
        code: context.code,
        createdAt: new Date().toISOString()
      })
      // In development the console is the inbox people look at.
      if (live === log) await log.send(message)
    },
    async ready () {
      return await live.ready()
    }
  }
  fastify.decorate('mailer', mailer)
  fastify.addHook('onClose', async () => { await live.close() })
}, { name: 'mailer', dependencies: ['config', 'redis'], fastify: '5.x' })
