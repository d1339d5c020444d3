/**
 * Server-side CAPTCHA checks against the provider's siteverify API (Cloudflare Turnstile,
 * hCaptcha, Google reCAPTCHA v2 and v3), which all take the same form-encoded request
 * (secret, response, remoteip) and answer `{ success, 'error-codes', hostname, … }`. Fails
 * closed: a provider that cannot be reached, is slow, answers an error or anything that is not
 * its documented JSON is `unavailable`, never a pass.
 */

export type CaptchaProvider = 'turnstile' | 'hcaptcha' | 'recaptcha'

export const SITEVERIFY_URLS: Readonly<Record<CaptchaProvider, string>> = {
  turnstile: 'https://challenges.cloudflare.com/turnstile/v0/siteverify',
  hcaptcha: 'https://api.hcaptcha.com/siteverify',
  recaptcha: 'https://www.google.com/recaptcha/api/siteverify'
}

/** A tenant's CAPTCHA, as the tenants file configures it. */
export interface CaptchaSettings {
  provider: CaptchaProvider
  /** The widget's secret key; sent to the provider only, never logged. */
  secret: string
  siteverifyUrl: string
  /** Hostnames the challenge must have been solved on; empty: any. */
  expectedHostnames: readonly string[]
  /** reCAPTCHA v3: the lowest score that passes; null: no score check. */
  minScore: number | null
  /** The widget's action the token must carry; null: any. */
  expectedAction: string | null
}

export type CaptchaOutcome =
  | { result: 'pass' }
  /** The provider says no, or the token cannot be one. */
  | { result: 'invalid', reasons: string[] }
  /** The provider could not give an answer (or the tenant's secret is wrong): fail closed. */
  | { result: 'unavailable', reason: string }

/** Longer than any provider's token (Turnstile documents 2048 characters); longer is not one. */
const MAX_TOKEN_LENGTH = 8192

/**
 * Error codes that say the service's own request or configuration is wrong, not the visitor's
 * token: the answer is then no answer at all.
 */
const OUR_FAULT = new Set(['missing-input-secret', 'invalid-input-secret', 'sitekey-secret-mismatch', 'bad-request', 'internal-error', 'invalid-keys'])

interface SiteverifyAnswer {
  success: boolean
  'error-codes'?: unknown
  hostname?: unknown
  score?: unknown
  action?: unknown
}

function isAnswer (value: unknown): value is SiteverifyAnswer {
  return typeof value === 'object' && value !== null && typeof (value as { success?: unknown }).success === 'boolean'
}

function strings (value: unknown): string[] {
  return Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string').slice(0, 10) : []
}

export class CaptchaVerifier {
  readonly #timeoutMs: number

  constructor (options: { timeoutMs: number }) {
    this.#timeoutMs = options.timeoutMs
  }

  /** Checks one token once (tokens are single-use at every provider), for the visitor at `remoteIp`. */
  async verify (settings: CaptchaSettings, token: string, remoteIp: string): Promise<CaptchaOutcome> {
    if (token.length > MAX_TOKEN_LENGTH || !/^[\x21-\x7e]+$/.test(token)) return { result: 'invalid', reasons: ['malformed-token'] }
    const body = new URLSearchParams({ secret: settings.secret, response: token, remoteip: remoteIp })
    let answer: unknown
    try {
      const response = await fetch(settings.siteverifyUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body,
        redirect: 'error',
        signal: AbortSignal.timeout(this.#timeoutMs)
      })
      if (!response.ok) return { result: 'unavailable', reason: `siteverify answered HTTP ${response.status}` }
      answer = await response.json()
    } catch (error) {
      const name = error instanceof Error ? error.name : 'Error'
      return { result: 'unavailable', reason: name === 'TimeoutError' ? `siteverify did not answer within ${this.#timeoutMs} ms` : `siteverify unreachable (${name})` }
    }
    if (!isAnswer(answer)) return { result: 'unavailable', reason: 'siteverify answered something else than its JSON' }
    const codes = strings(answer['error-codes'])
    const ourFault = codes.find((code) => OUR_FAULT.has(code))
    if (ourFault !== undefined) return { result: 'unavailable', reason: `siteverify refused the service's request: ${ourFault}` }
    if (!answer.success) return { result: 'invalid', reasons: codes.length > 0 ? codes : ['not-success'] }
    const reasons: string[] = []
    if (settings.expectedHostnames.length > 0 && !(typeof answer.hostname === 'string' && settings.expectedHostnames.includes(answer.hostname.toLowerCase()))) reasons.push('hostname-mismatch')
    if (settings.minScore !== null && !(typeof answer.score === 'number' && answer.score >= settings.minScore)) reasons.push('score-too-low')
    if (settings.expectedAction !== null && answer.action !== settings.expectedAction) reasons.push('action-mismatch')
    return reasons.length === 0 ? { result: 'pass' } : { result: 'invalid', reasons }
  }
}
