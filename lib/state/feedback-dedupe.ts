/** Remembers handled MessageIds (SNS delivers at least once). */
export interface FeedbackDedupe {
  /** True when the id is new (and now taken), false when it was handled already. */
  claim (messageId: string): Promise<boolean>
  /** Forgets an id whose handling failed, so SNS's retry is handled. */
  release (messageId: string): Promise<void>
}
