/** Why a message was refused, as the stable error code of the answer. */
export type FeedbackRefusal =
  | 'SNS_MESSAGE_INVALID'
  | 'SNS_TOPIC_NOT_ALLOWED'
  | 'SNS_MESSAGE_STALE'
  | 'SNS_CERT_URL_NOT_ALLOWED'
  | 'SNS_SIGNATURE_INVALID'

export class FeedbackRefused extends Error {
  readonly code: FeedbackRefusal
  constructor (code: FeedbackRefusal, message: string) {
    super(message)
    this.name = 'FeedbackRefused'
    this.code = code
  }
}

/** The signing certificate could not be fetched, or the subscription not confirmed: SNS should retry. */
export class FeedbackUnavailable extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'FeedbackUnavailable'
  }
}

/** One source asked for too many new signing certificates: it may ask again after `retryAfterSeconds`. */
export class FeedbackThrottled extends Error {
  readonly retryAfterSeconds: number
  constructor (message: string, retryAfterSeconds: number) {
    super(message)
    this.name = 'FeedbackThrottled'
    this.retryAfterSeconds = retryAfterSeconds
  }
}
