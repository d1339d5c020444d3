import type { Env } from '../../schemas/env.js'
import { ConfigError } from './error.js'
import type { Config } from './types.js'

/** Provider feedback: the SNS topics SES reports to, where their certificates may come from, how long a suppression lasts. */
export function feedbackConfig (env: Env): Pick<Config, 'sesFeedback' | 'suppressionMs'> {
  let certUrlPattern: RegExp
  try {
    // Matched against the whole URL, anchors or not: `sns\.example` must not admit
    // https://evil.example/sns.example.pem.
    certUrlPattern = new RegExp(`^(?:${env.SNS_SIGNING_CERT_URL_PATTERN})$`)
  } catch {
    throw new ConfigError('SNS_SIGNING_CERT_URL_PATTERN', 'is not a valid regular expression')
  }
  return {
    sesFeedback: { topicArns: new Set((env.SES_FEEDBACK_TOPIC_ARNS ?? '').split(',').filter((arn) => arn !== '')), certUrlPattern },
    suppressionMs: env.SUPPRESSION_DAYS * 86_400_000
  }
}
