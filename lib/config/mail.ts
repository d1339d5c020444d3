import type { Env } from '../../schemas/env.js'
import type { MailerConfig, MailTransportName } from '../mail/delivery/mailer.js'
import { validateEmail } from '../recipients/address.js'
import { durationMs } from './env.js'
import { ConfigError } from './error.js'

/** How live mail leaves: the providers in order, each one's settings, the sender, the breaker (the providers' settings are the mailer's own). */
export interface MailConfig extends MailerConfig {
  mailFrom: string
}

const DEFAULT_LOG_SENDER = 'Email OTP <no-reply@localhost>'

export function mailConfig (env: Env): MailConfig {
  const mailTransports = env.MAIL_TRANSPORT.split(',') as MailTransportName[]
  if (new Set(mailTransports).size !== mailTransports.length) {
    throw new ConfigError('MAIL_TRANSPORT', `names a provider twice (${env.MAIL_TRANSPORT})`)
  }
  if (env.MAIL_TRANSPORT !== 'log' && env.MAIL_FROM === undefined) {
    throw new ConfigError('MAIL_FROM', `is required when MAIL_TRANSPORT=${env.MAIL_TRANSPORT}`)
  }
  if (env.MAIL_FROM !== undefined && !isSender(env.MAIL_FROM)) {
    throw new ConfigError('MAIL_FROM', `must be an email address, or "Name <address>" (got ${JSON.stringify(env.MAIL_FROM)})`)
  }
  if (mailTransports.includes('smtp') && env.SMTP_URL === undefined) {
    throw new ConfigError('SMTP_URL', `is required when MAIL_TRANSPORT=${env.MAIL_TRANSPORT}`)
  }
  if (mailTransports.includes('ses') && env.AWS_REGION === undefined) {
    throw new ConfigError('AWS_REGION', `is required when MAIL_TRANSPORT=${env.MAIL_TRANSPORT}`)
  }
  return {
    mailTransports,
    mailBreaker: { failures: env.MAIL_BREAKER_FAILURES, openMs: durationMs(env, 'MAIL_BREAKER_OPEN_SECONDS') },
    mailFrom: env.MAIL_FROM ?? DEFAULT_LOG_SENDER,
    mailTimeoutMs: durationMs(env, 'MAIL_TIMEOUT_MS'),
    smtpUrl: env.SMTP_URL ?? null,
    ses: { region: env.AWS_REGION ?? null, endpoint: env.AWS_ENDPOINT_URL_SESV2 ?? null, configurationSet: env.SES_CONFIGURATION_SET ?? null }
  }
}

/** An address, or `Name <address>` with a name that cannot break out of the header. */
function isSender (value: string): boolean {
  const named = /^([^<>"\r\n\u0000-\u001f]*?)\s*<([^<>]+)>$/.exec(value)
  return validateEmail(named === null ? value : named[2] ?? '').ok
}
