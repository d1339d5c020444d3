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

/**
 * Why a message cannot be handled now (SNS retries each):
 * - `certificate-failed`: the fetch of the certificate URL it names failed, now or within
 *   FAILED_CERT_URL_MS; every message naming that URL gets the same answer for that long.
 * - `certificate-pending`: its certificate is not fetched yet and cannot be now (the sender's
 *   own fetch is under way, or every fetch slot is).
 * - `confirmation-failed`: the subscription's SubscribeURL did not answer.
 */
export type UnavailableReason = 'certificate-failed' | 'certificate-pending' | 'confirmation-failed'

/** The signing certificate could not be fetched, or the subscription not confirmed: SNS should retry. */
export class FeedbackUnavailable extends Error {
  readonly reason: UnavailableReason
  constructor (reason: UnavailableReason, message: string) {
    super(message)
    this.name = 'FeedbackUnavailable'
    this.reason = reason
  }

  /**
   * The answer turns on what the message names and who sends it, before any store is asked:
   * anyone may send it again at once, and it costs a body's reading each time. A subscription
   * that SNS's host did not confirm is the service's reach, not the sender's doing.
   */
  get sendersOwn (): boolean {
    return this.reason !== 'confirmation-failed'
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
