/**
 * One of the service's HMAC keys (OTP_HMAC_KEYS): codes are signed with them, and the receipts'
 * derived signing keys come from them, so the type sits below both.
 */
export interface MacKey {
  id: string
  secret: Buffer
}
