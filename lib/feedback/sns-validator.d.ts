declare module 'sns-validator' {
  /** sns-validator's MessageValidator: checks an SNS message's structure, certificate host and signature. */
  export default class MessageValidator {
    constructor (hostPattern?: RegExp, encoding?: string)
    validate (message: Record<string, unknown> | string, callback: (error: Error | null, message?: Record<string, unknown>) => void): void
  }
}
