import type { Env } from '../../schemas/env.js'
import { ConfigError } from './error.js'

/** Provider feedback: the SNS topics SES reports to, where their certificates may come from, how long a suppression lasts. */
export interface FeedbackConfig {
  /** SNS topics whose messages POST /feedback/ses accepts, and where their signing certificates may come from. */
  sesFeedback: { topicArns: ReadonlySet<string>, certUrlPattern: RegExp }
  /** How long a suppression lasts. */
  suppressionMs: number
}

export function feedbackConfig (env: Env): FeedbackConfig {
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
