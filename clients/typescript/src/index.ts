import type { components, operations } from './openapi.js'

type Schemas = components['schemas']

/** A stable error code of the service, as listed by its OpenAPI document. */
export type ErrorCode = Schemas['ErrorCode']

/**
 * Codes of failures the client meets itself, with no answer of the service to name them:
 * `NETWORK_ERROR` (no answer: connection refused or lost, DNS, timeout) and
 * `UNEXPECTED_RESPONSE` (an answer that is not the service's JSON, e.g. a proxy's error page).
 */
export type ClientErrorCode = 'NETWORK_ERROR' | 'UNEXPECTED_RESPONSE'

type JsonBody<Answer> = Answer extends { content: { 'application/json': infer Body } } ? Body : never
type ErrorCodes<Responses> = { [Status in keyof Responses]: Status extends 200 ? never : JsonBody<Responses[Status]> extends { code: infer Code } ? Code : never }[keyof Responses]

/** The codes dispatch can answer, from the document: a `switch` on them can be exhaustive. */
export type DispatchErrorCode = ErrorCodes<operations['dispatchCode']['responses']>
/** The codes verify can answer, from the document. */
export type VerifyErrorCode = ErrorCodes<operations['verifyCode']['responses']>
/** The codes redeemReceipt can answer, from the document. */
export type RedeemErrorCode = ErrorCodes<operations['redeemReceipt']['responses']>
/** The codes sandboxMessages can answer, from the document. */
export type SandboxMessagesErrorCode = ErrorCodes<operations['listSandboxMessages']['responses']>
/** The codes verification can answer, from the document (`NOT_FOUND` for any requestId it will not tell about). */
export type VerificationErrorCode = ErrorCodes<operations['getVerification']['responses']>
/** The codes insights can answer, from the document. */
export type InsightsErrorCode = ErrorCodes<operations['getInsights']['responses']>
/** The codes previewTemplate can answer, from the document. */
export type PreviewTemplateErrorCode = ErrorCodes<operations['previewTemplate']['responses']>

export type DispatchRequest = Schemas['DispatchRequest']
export type DispatchReply = Schemas['DispatchReply']
export type VerifyRequest = Schemas['VerifyRequest']
export type VerifyReply = Schemas['VerifyReply']
export type RedeemRequest = Schemas['RedeemRequest']
export type RedeemReply = Schemas['RedeemReply']
/** The claims of a redeemed receipt: tenant, mode, requestId, addressHash, expiry… */
export type ReceiptClaims = RedeemReply['data']['claims']
export type SandboxMessagesReply = Schemas['SandboxMessagesReply']
/** One message a sandbox key sent, with its code. */
export type SandboxMessage = SandboxMessagesReply['data']['messages'][number]
export type UsageReply = Schemas['UsageReply']
/** The tenant's tier and its live and sandbox allowance in the current window. */
export type Usage = UsageReply['data']
export type VerificationReply = Schemas['VerificationReply']
/** The story of one verification: its state and its events, without the address or the code. */
export type Verification = VerificationReply['data']
/** Where a verification stands: `pending`, `verified`, `failed`, `locked`, `expired`, `delivery_failed`. */
export type VerificationState = Verification['state']
/** One event of a verification's story; `type` tells which fields it has. */
export type VerificationEvent = Verification['events'][number]
export type InsightsReply = Schemas['InsightsReply']
/** The tenant's funnel in the key's mode: every bucket of the range and the totals. */
export type Insights = InsightsReply['data']
/** One hour's or day's funnel: requested, sent, delivered, verified, refused… */
export type InsightsBucket = Insights['buckets'][number]
export type UnlockReply = Schemas['UnlockReply']
export type SuppressReply = Schemas['SuppressReply']
export type UnsuppressReply = Schemas['UnsuppressReply']
export type TemplatePreviewRequest = Schemas['TemplatePreviewRequest']
export type TemplatePreviewReply = Schemas['TemplatePreviewReply']
/** The message as the tenant's users get it in one language: subject, text, html. */
export type TemplatePreview = TemplatePreviewReply['data']
/** The public keys that verify receipts (a JWKS). */
export type ReceiptKeys = Schemas['Jwks']
export type Liveness = Schemas['LiveReply']
export type Readiness = Schemas['ReadyReply']

/** What dispatch resolves to: the reply's `data` (the requestId to verify), and how it came. */
export type DispatchResult = DispatchReply['data'] & {
  message: DispatchReply['message']
  /** The Idempotency-Key every attempt carried: send it again to replay this dispatch. */
  idempotencyKey: string
  /** The service answered a stored reply to an earlier request with this key: no second mail. */
  replayed: boolean
}

/** What a right guess resolves to: the reply's `data` (the signed receipt for the backend). */
export type VerifyResult = VerifyReply['data'] & { message: VerifyReply['message'] }

/** The one error every call rejects with. Branch on `code`, never on `message`. */
export class EmailOtpError extends Error {
  /** The service's stable code, or a {@link ClientErrorCode} when it did not answer one. */
  readonly code: ErrorCode | ClientErrorCode
  /** The HTTP status, 0 when no answer arrived. */
  readonly status: number
  /** Seconds to wait before trying again, from `Retry-After` (429, 409, 503). */
  readonly retryAfter: number | undefined
  /** The requestId of the code the failed call was about (verify). */
  readonly requestId: string | undefined
  /** The answer's `X-Request-Id`: quote it when reporting a problem to the service's operator. */
  readonly traceId: string | undefined
  /** How many requests were made, retries included. */
  readonly attempts: number

  constructor (details: { code: ErrorCode | ClientErrorCode, status: number, message: string, retryAfter?: number | undefined, requestId?: string | undefined, traceId?: string | undefined, attempts: number, cause?: unknown }) {
    super(details.message, details.cause === undefined ? undefined : { cause: details.cause })
    this.name = 'EmailOtpError'
    this.code = details.code
    this.status = details.status
    this.retryAfter = details.retryAfter
    this.requestId = details.requestId
    this.traceId = details.traceId
    this.attempts = details.attempts
  }
}

/** The part of `fetch` the client uses: the global one in Node 20+ and in browsers fits. */
export type Fetch = (url: string, init: RequestInit) => Promise<Response>

export interface ClientOptions {
  /** Where the service is, e.g. `https://otp.example.com` (a path prefix is kept). */
  baseUrl: string
  /** `sk_…` in a backend, `rk_…` in a page. */
  apiKey: string
  /** Another `fetch` (one with a proxy agent, say). Default: the global `fetch`. */
  fetch?: Fetch
  /** Retries after the first attempt, for the failures each call retries. Default 2. */
  retries?: number
  /** Longest wait before a retry; a `Retry-After` longer than this is not waited out. Default 10 000 ms. */
  maxRetryDelayMs?: number
  /** Deadline of one attempt; past it the attempt counts as a network error. Default 15 000 ms. */
  timeoutMs?: number
}

export interface DispatchOptions {
  /** Language of the mail (`en`, `fr`, `de`, `es`, or a BCP 47 tag that falls back). */
  locale?: DispatchRequest['locale']
  /** Makes the call safe to repeat. Default: a fresh UUID per call, kept across its retries. */
  idempotencyKey?: string
  /** The end user's address, when a backend calls for one (secret keys only). */
  endUserIp?: string
  /** The CAPTCHA widget's token, when the tenant requires one of restricted keys. */
  captchaToken?: string
}

export interface VerifyOptions {
  /** The end user's address, when a backend calls for one (secret keys only). */
  endUserIp?: string
}

/**
 * Whose address a receipt must be for: the address the user claims (the default to use), or,
 * for a backend that compares the `addressHash` claim itself, explicitly any.
 */
export type RedeemAddress = { email: string } | { anyAddress: true }

export interface SandboxMessagesOptions {
  /** Only the message of this dispatch. */
  requestId?: string
}

export interface InsightsOptions {
  /** `hour` (at most 168 buckets) or `day` (the default, at most 400). */
  granularity?: 'hour' | 'day'
  /** The range's start (a Date or an RFC 3339 string); by default 24 hours or 30 days before `to`. */
  from?: Date | string
  /** The range's end, exclusive; by default now. */
  to?: Date | string
}

export interface EmailOtpClient {
  /** Mails a code to `email`; resolves to the requestId to verify. */
  dispatch (email: string, options?: DispatchOptions): Promise<DispatchResult>
  /** Checks the code the person typed. Every call uses the code up, right or wrong. */
  verify (requestId: string, guess: string, options?: VerifyOptions): Promise<VerifyResult>
  /** Checks a receipt a page handed over and uses it up (secret keys). Resolves to its claims. */
  redeemReceipt (receipt: string, address: RedeemAddress): Promise<ReceiptClaims>
  /** What sandbox keys sent to `email`, newest first, codes included (sandbox keys only). */
  sandboxMessages (email: string, options?: SandboxMessagesOptions): Promise<SandboxMessage[]>
  /** The tenant's tier and allowance in the current window (secret keys). */
  usage (): Promise<Usage>
  /** The story of one verification of the key's tenant and mode (secret keys); `NOT_FOUND` past VERIFICATION_LOG_DAYS. */
  verification (requestId: string): Promise<Verification>
  /** The tenant's funnel per hour or day in the key's mode (secret keys); `INSIGHTS_RANGE_*` for a range it will not answer. */
  insights (options?: InsightsOptions): Promise<Insights>
  /** Clears a recipient's lockout and run of wrong guesses (secret keys). */
  unlockRecipient (email: string): Promise<UnlockReply['data']>
  /** Stops all mail to a recipient for SUPPRESSION_DAYS (secret keys). */
  suppressRecipient (email: string): Promise<SuppressReply['data']>
  /** Lifts a recipient's suppression (secret keys). */
  unsuppressRecipient (email: string): Promise<UnsuppressReply['data']>
  /** Renders the tenant's message in one language with a sample code (secret keys). */
  previewTemplate (request?: TemplatePreviewRequest): Promise<TemplatePreview>
  /** The public keys that verify receipts, for a backend that checks them itself. No key needed. */
  receiptKeys (): Promise<ReceiptKeys>
  /** Liveness: resolves while the process answers. No key needed. */
  liveness (): Promise<Liveness>
  /** Readiness: `ready` false (a 503) is an answer, not an error. No key needed. */
  readiness (): Promise<Readiness>
}

interface Attempted {
  response: Response
  body: unknown
  traceId: string | undefined
  retryAfter: number | undefined
}

/** When a failure may be retried: what each operation can safely repeat. */
interface RetryPolicy {
  networkErrors: boolean
  retriable: (status: number, code: unknown) => boolean
}

const DISPATCH_RETRIES: RetryPolicy = {
  // The Idempotency-Key makes a repeated dispatch return the first answer: no second mail.
  networkErrors: true,
  // 409: the retry overtook the first attempt, still running; a second later it is replayed.
  retriable: (status, code) => status === 503 || (status === 409 && code === 'IDEMPOTENCY_IN_FLIGHT')
}

/** Reads and settings that change nothing when repeated: every failure without an answer is retried. */
const SAFE_RETRIES: RetryPolicy = {
  networkErrors: true,
  retriable: (status) => status === 503
}

/**
 * A redemption that reached the service used the receipt up: repeated after a lost answer it
 * would answer 409 RECEIPT_ALREADY_REDEEMED. A 503 was answered before the receipt was used.
 */
const REDEEM_RETRIES: RetryPolicy = {
  networkErrors: false,
  retriable: (status) => status === 503
}

const VERIFY_RETRIES: RetryPolicy = {
  // A verify that reached the service used the code up, right or wrong: repeating it after a
  // lost answer would turn a right guess into CODE_MISMATCH. Without an answer the client
  // cannot tell whether it arrived, so it does not repeat.
  networkErrors: false,
  // A 503 means the service could not reach its token store: the code was not used.
  retriable: (status) => status === 503
}

export function createClient (options: ClientOptions): EmailOtpClient {
  if (typeof options.baseUrl !== 'string' || options.baseUrl === '') throw new TypeError('createClient: baseUrl is required')
  if (typeof options.apiKey !== 'string' || options.apiKey === '') throw new TypeError('createClient: apiKey is required')
  const base = options.baseUrl.replace(/\/+$/, '')
  const send: Fetch = options.fetch ?? (async (url, init) => await globalThis.fetch(url, init))
  const retries = Math.max(0, Math.floor(options.retries ?? 2))
  const maxRetryDelayMs = options.maxRetryDelayMs ?? 10_000
  const timeoutMs = options.timeoutMs ?? 15_000

  /** `body` undefined: a GET. */
  async function attempt (path: string, headers: Record<string, string>, body: unknown): Promise<Attempted> {
    const response = await send(base + path, body === undefined
      ? { method: 'GET', headers: { authorization: `Bearer ${options.apiKey}`, ...headers }, signal: AbortSignal.timeout(timeoutMs) }
      : {
          method: 'POST',
          headers: { authorization: `Bearer ${options.apiKey}`, 'content-type': 'application/json', ...headers },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs)
        })
    const text = await response.text()
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = undefined
    }
    return { response, body: parsed, traceId: response.headers.get('x-request-id') ?? undefined, retryAfter: parseRetryAfter(response.headers.get('retry-after')) }
  }

  /**
   * Runs one call with its retries; resolves to the successful answer or rejects with
   * EmailOtpError. `expected` tells the service's answer from anything else; `answers`, the
   * statuses that are answers rather than errors.
   */
  async function call (path: string, headers: Record<string, string>, body: unknown, policy: RetryPolicy, expected: (reply: Record<string, unknown>) => boolean, requestId?: string, answers: readonly number[] = [200]): Promise<Attempted> {
    for (let attempts = 1; ; attempts++) {
      let answer: Attempted
      try {
        answer = await attempt(path, headers, body)
      } catch (cause) {
        const error = new EmailOtpError({ code: 'NETWORK_ERROR', status: 0, message: describeNetworkError(cause, timeoutMs), requestId, attempts, cause })
        const delay = policy.networkErrors && attempts <= retries ? backoff(attempts, undefined, maxRetryDelayMs) : undefined
        if (delay === undefined) throw error
        await sleep(delay)
        continue
      }
      const { response, body: reply, traceId, retryAfter } = answer
      if (answers.includes(response.status) && isRecord(reply) && expected(reply)) return answer
      const code = isRecord(reply) && typeof reply.code === 'string' ? reply.code : undefined
      const delay = policy.retriable(response.status, code) && attempts <= retries ? backoff(attempts, retryAfter, maxRetryDelayMs) : undefined
      if (delay !== undefined) {
        await sleep(delay)
        continue
      }
      if (code !== undefined && response.status >= 400) {
        const message = isRecord(reply) && typeof reply.message === 'string' ? reply.message : code
        // The document lists every code the service sends; a newer service may add some.
        throw new EmailOtpError({ code: code as ErrorCode, status: response.status, message, retryAfter, requestId, traceId, attempts })
      }
      throw new EmailOtpError({ code: 'UNEXPECTED_RESPONSE', status: response.status, message: `Unexpected answer: HTTP ${response.status}`, retryAfter, requestId, traceId, attempts })
    }
  }

  /** The `data` of a `{ success: true, data }` answer, once `expected` recognises it. */
  async function callForData<Data> (path: string, body: unknown, policy: RetryPolicy, expected: (data: Record<string, unknown>) => boolean): Promise<Data> {
    const { body: reply } = await call(path, {}, body, policy, (answer) => answer.success === true && isRecord(answer.data) && expected(answer.data))
    return (reply as { data: Data }).data
  }

  return {
    async dispatch (email, dispatchOptions = {}) {
      const idempotencyKey = dispatchOptions.idempotencyKey ?? randomKey()
      const headers: Record<string, string> = { 'idempotency-key': idempotencyKey }
      if (dispatchOptions.endUserIp !== undefined) headers['end-user-ip'] = dispatchOptions.endUserIp
      if (dispatchOptions.captchaToken !== undefined) headers['captcha-token'] = dispatchOptions.captchaToken
      const body: DispatchRequest = dispatchOptions.locale === undefined ? { email } : { email, locale: dispatchOptions.locale }
      const { response, body: reply } = await call('/otp/request', headers, body, DISPATCH_RETRIES, (answer) => isRecord(answer.data) && typeof answer.data.requestId === 'string')
      const { message, data } = reply as DispatchReply
      return { ...data, message, idempotencyKey, replayed: response.headers.get('idempotent-replayed') === 'true' }
    },

    async verify (requestId, guess, verifyOptions = {}) {
      const headers: Record<string, string> = {}
      if (verifyOptions.endUserIp !== undefined) headers['end-user-ip'] = verifyOptions.endUserIp
      const body: VerifyRequest = { requestId, userGuess: guess }
      const { body: reply } = await call('/otp/verify', headers, body, VERIFY_RETRIES, (answer) => isRecord(answer.data) && typeof answer.data.receipt === 'string', requestId)
      const { message, data } = reply as VerifyReply
      return { ...data, message }
    },

    async redeemReceipt (receipt, address) {
      const body: RedeemRequest = 'email' in address ? { receipt, email: address.email } : { receipt, anyAddress: true }
      const data = await callForData<RedeemReply['data']>('/otp/receipts/redeem', body, REDEEM_RETRIES, (answer) => isRecord(answer.claims))
      return data.claims
    },

    async sandboxMessages (email, messagesOptions = {}) {
      const query = new URLSearchParams({ email })
      if (messagesOptions.requestId !== undefined) query.set('requestId', messagesOptions.requestId)
      const data = await callForData<SandboxMessagesReply['data']>(`/sandbox/messages?${query.toString()}`, undefined, SAFE_RETRIES, (answer) => Array.isArray(answer.messages))
      return data.messages
    },

    async usage () {
      return await callForData<Usage>('/usage', undefined, SAFE_RETRIES, (answer) => typeof answer.tier === 'string')
    },

    async verification (requestId) {
      return await callForData<Verification>(`/verifications/${encodeURIComponent(requestId)}`, undefined, SAFE_RETRIES, (answer) => typeof answer.state === 'string' && Array.isArray(answer.events))
    },

    async insights (insightsOptions = {}) {
      const query = new URLSearchParams()
      if (insightsOptions.granularity !== undefined) query.set('granularity', insightsOptions.granularity)
      for (const bound of ['from', 'to'] as const) {
        const value = insightsOptions[bound]
        if (value !== undefined) query.set(bound, value instanceof Date ? value.toISOString() : value)
      }
      const search = query.toString()
      return await callForData<Insights>(`/insights${search === '' ? '' : `?${search}`}`, undefined, SAFE_RETRIES, (answer) => Array.isArray(answer.buckets) && isRecord(answer.totals))
    },

    async unlockRecipient (email) {
      return await callForData<UnlockReply['data']>('/recipients/unlock', { email }, SAFE_RETRIES, (answer) => typeof answer.cleared === 'boolean')
    },

    async suppressRecipient (email) {
      return await callForData<SuppressReply['data']>('/recipients/suppress', { email }, SAFE_RETRIES, (answer) => typeof answer.suppressedUntil === 'string')
    },

    async unsuppressRecipient (email) {
      return await callForData<UnsuppressReply['data']>('/recipients/unsuppress', { email }, SAFE_RETRIES, (answer) => typeof answer.lifted === 'boolean')
    },

    async previewTemplate (request = {}) {
      return await callForData<TemplatePreview>('/templates/preview', request, SAFE_RETRIES, (answer) => typeof answer.html === 'string')
    },

    async receiptKeys () {
      const { body: reply } = await call('/.well-known/jwks.json', {}, undefined, SAFE_RETRIES, (answer) => Array.isArray(answer.keys))
      return reply as ReceiptKeys
    },

    async liveness () {
      const { body: reply } = await call('/healthz', {}, undefined, SAFE_RETRIES, (answer) => answer.ok === true)
      return reply as Liveness
    },

    async readiness () {
      // Not retried on 503: not ready is the answer a probe asks for.
      const { body: reply } = await call('/readyz', {}, undefined, { networkErrors: true, retriable: () => false }, (answer) => typeof answer.ready === 'boolean', undefined, [200, 503])
      return reply as Readiness
    }
  }
}

/** Seconds from a `Retry-After` header: a number of seconds or an HTTP date. */
export function parseRetryAfter (value: string | null): number | undefined {
  if (value === null) return undefined
  const trimmed = value.trim()
  if (/^\d+$/.test(trimmed)) return Number(trimmed)
  const date = Date.parse(trimmed)
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - Date.now()) / 1000))
}

/**
 * The wait before retry number `attempt`: what `Retry-After` asks, or exponential backoff with
 * jitter (250 ms, 500 ms, 1 s… each between half and all of it). Undefined when the service
 * asks for longer than `cap`: the caller gets the error and its `retryAfter` at once.
 */
function backoff (attempt: number, retryAfter: number | undefined, cap: number): number | undefined {
  if (retryAfter !== undefined) return retryAfter * 1000 > cap ? undefined : retryAfter * 1000
  const ceiling = Math.min(cap, 250 * 2 ** (attempt - 1))
  return ceiling / 2 + Math.random() * ceiling / 2
}

async function sleep (ms: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms))
}

function isRecord (value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null
}

function describeNetworkError (cause: unknown, timeoutMs: number): string {
  if (isRecord(cause) && cause.name === 'TimeoutError') return `No answer within ${timeoutMs} ms`
  const reason = cause instanceof Error ? (cause.cause instanceof Error ? cause.cause.message : cause.message) : String(cause)
  return `The service could not be reached: ${reason}`
}

/**
 * A version 4 UUID. `crypto.randomUUID` exists only in secure contexts (HTTPS, localhost);
 * a page served over plain HTTP elsewhere still has `crypto.getRandomValues`.
 */
function randomKey (): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID()
  const bytes = crypto.getRandomValues(new Uint8Array(16))
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x40
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}
