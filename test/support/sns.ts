import { createSign, randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'

/** The key and certificate a test's SNS host signs with and serves (test/fixtures/sns/). */
export const SNS_KEY = readFileSync(new URL('../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')
export const SNS_CERT = readFileSync(new URL('../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')
/** The topic the tests' SES events arrive on (SES_FEEDBACK_TOPIC_ARNS), and the certificate's path on the host. */
export const SNS_TOPIC = 'arn:aws:sns:eu-west-1:123456789012:ses-events'
export const SNS_CERT_PATH = '/SimpleNotificationService-0123456789abcdef.pem'

/** An SES event for one recipient of acme's live dispatch, in a Notification signed as SNS signs it (v2). */
export function signedFeedback (origin: string, requestId: string, address: string, eventType: string, details: object): Record<string, unknown> {
  const message = {
    Type: 'Notification',
    MessageId: randomUUID(),
    TopicArn: SNS_TOPIC,
    Message: JSON.stringify({ eventType, mail: { messageId: 'ses-1', destination: [address], tags: { tenant: ['acme'], mode: ['live'], requestId: [requestId] } }, ...details }),
    Timestamp: new Date().toISOString(),
    SigningCertURL: `${origin}${SNS_CERT_PATH}`
  }
  const signer = createSign('RSA-SHA256')
  for (const field of ['Message', 'MessageId', 'Timestamp', 'TopicArn', 'Type'] as const) signer.update(`${field}\n${message[field]}\n`)
  return { ...message, SignatureVersion: '2', Signature: signer.sign(SNS_KEY, 'base64') }
}
