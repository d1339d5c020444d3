import { hash, X509Certificate, type KeyObject } from 'node:crypto'
import { get as httpsGet } from 'node:https'
import { LruMap } from 'toad-cache'
import { FeedbackThrottled, FeedbackUnavailable } from './refusals.js'
import type { CertificateUrl } from './sns-message.js'

/** Bound on fetching one signing certificate, headers and body. */
const CERT_FETCH_TIMEOUT_MS = 5000
/** SNS's certificates are about 2 KB of PEM; a body past this is not one. */
export const CERT_MAX_BYTES = 16_384
/**
 * Fetches under way at once, whoever asked: past it, a message naming a new URL is answered 503.
 * No budget of new URLs is shared by every source: a few strangers could spend it at the start
 * of each minute and keep SNS's own certificate out of an instance that has not fetched it. A fetch from
 * SNS's hosts ends within a fraction of a second, and each source holds at most one of them
 * (CERT_FETCHES_PER_SOURCE.inFlight), so keeping the eight in flight takes eight sources at
 * every moment and, at one new URL a minute each, thousands of them.
 */
export const CERT_FETCHES_IN_FLIGHT = 8
/**
 * Fetches one source may start: a burst, then one a minute; and at most `inFlight` under way at
 * once. SNS posts from many addresses and needs a fetch a day; a stranger naming made-up URLs
 * spends its own tokens, not the others', and holds one of the fetches in flight at most,
 * also where it spends no tokens (every caller through the mesh sidecar without an identity).
 */
export const CERT_FETCHES_PER_SOURCE = { burst: 3, refillMs: 60_000, inFlight: 1 }
/**
 * An IPv6 source is counted per /48 here (or the shorter IPV6_BUCKET_PREFIX), not per /64: a
 * /48 is what one site is given (a tunnel broker hands one out free), so 65,536 /64s are one
 * source, with one fetch in flight and one bucket.
 */
export const CERT_FETCH_IPV6_PREFIX = 48
/** A certificate is fetched again after this long, so a rotated or revoked one is not trusted forever. */
export const CERT_KEPT_MS = 24 * 60 * 60 * 1000
/** A certificate URL whose fetch failed is not fetched again for this long. */
export const FAILED_CERT_URL_MS = 60_000
/** Public keys kept, failing URLs remembered and sources counted (each a small object). */
const CERT_URLS_REMEMBERED = 1000
const SOURCES_REMEMBERED = 10_000

/** Who asks for a certificate: its source, and whether it spends tokens of its own. */
export interface CertificateRequester {
  /** The sender's bucket: an address, an IPv6 /48, a workload, or every caller through the sidecar without an identity. */
  source: string
  /**
   * False for a source that cannot be told apart from any other (every caller through the mesh
   * sidecar without an identity), whose one shared bucket would let a stranger spend SNS's own
   * tokens: its fetches are bound by its one fetch in flight and the fetches in flight alone.
   */
  spendsTokens: boolean
}

export interface SigningCertificatesOptions {
  now?: () => number
  /** Bound on one fetch (tests shorten it). */
  timeoutMs?: number
  /**
   * Told of each failed fetch: once per URL per FAILED_CERT_URL_MS, however many messages
   * name it meanwhile (they share the fetch, then the failure's memory).
   */
  fetchFailed?: (url: string, reason: string) => void
}

/**
 * The public keys of SNS's signing certificates, by a digest of their URL (a long URL costs no
 * more memory than a short one): fetched over node:https from the checked host and path on
 * port 443 (the system's trust store, no redirect followed) within a deadline and a size
 * bound, kept in a bounded LRU for a day, with concurrent requests for one URL sharing one
 * fetch. A fetch is started only within four bounds, checked in this order: a URL that failed
 * is not tried again for a minute (503); the source that asks has no fetch of its own under way
 * (503); it has a token (429, Retry-After); fewer than CERT_FETCHES_IN_FLIGHT fetches are under
 * way (503: SNS retries later). Renewing a certificate after its day is bound by the first and
 * the fetches in flight only. A renewal that fails (the certificate is gone) drops trust in it:
 * the old key is not used past its day.
 */
export class SigningCertificates {
  readonly #now: () => number
  readonly #timeoutMs: number
  readonly #fetchFailed: (url: string, reason: string) => void
  readonly #keys = new LruMap<{ key: KeyObject, until: number }>(CERT_URLS_REMEMBERED)
  readonly #failedUntil = new LruMap<number>(CERT_URLS_REMEMBERED)
  readonly #sources = new LruMap<{ tokens: number, at: number }>(SOURCES_REMEMBERED)
  readonly #fetching = new Map<string, Promise<KeyObject>>()
  /** Fetches under way per source that started them (renewals are no source's). */
  readonly #inFlight = new Map<string, number>()

  constructor (options: SigningCertificatesOptions = {}) {
    this.#now = options.now ?? Date.now
    this.#timeoutMs = options.timeoutMs ?? CERT_FETCH_TIMEOUT_MS
    this.#fetchFailed = options.fetchFailed ?? (() => {})
  }

  /** The public key of the certificate at `url` (checked by signingCertificateUrl), for a message from `requester`. */
  async publicKey (url: CertificateUrl, requester: CertificateRequester): Promise<KeyObject> {
    const id = hash('sha256', url.href, 'base64url')
    const known = this.#keys.get(id)
    if (known !== undefined && known.until > this.#now()) return known.key
    const fetching = this.#fetching.get(id)
    if (fetching !== undefined) return await fetching
    // Renewing a certificate this URL served before is charged to no source: strangers spending
    // SNS's sources' tokens with made-up URLs must not stop SNS's own certificate from being
    // fetched again when its day is up. At most one renewal per URL a day, of at most 1,000 URLs
    // that served a certificate.
    const source = known === undefined ? requester : null
    this.#admit(id, source)
    const fetch = this.#fetch(id, url)
    this.#fetching.set(id, fetch)
    if (source !== null) this.#inFlight.set(source.source, (this.#inFlight.get(source.source) ?? 0) + 1)
    try {
      return await fetch
    } finally {
      this.#fetching.delete(id)
      if (source !== null) {
        const left = (this.#inFlight.get(source.source) ?? 1) - 1
        if (left === 0) this.#inFlight.delete(source.source)
        else this.#inFlight.set(source.source, left)
      }
    }
  }

  /** `requester`: null for a renewal, which only the failed-URL memory and the fetches in flight bound. */
  #admit (id: string, requester: CertificateRequester | null): void {
    const now = this.#now()
    const failedUntil = this.#failedUntil.get(id)
    if (failedUntil !== undefined && failedUntil > now) throw new FeedbackUnavailable('certificate-failed', 'the signing certificate could not be fetched a moment ago')
    const { burst, refillMs, inFlight } = CERT_FETCHES_PER_SOURCE
    if (requester !== null && (this.#inFlight.get(requester.source) ?? 0) >= inFlight) throw new FeedbackUnavailable('certificate-pending', 'this source\'s signing certificate fetch is under way')
    if (requester === null || !requester.spendsTokens) {
      if (this.#fetching.size >= CERT_FETCHES_IN_FLIGHT) throw new FeedbackUnavailable('certificate-pending', 'too many signing certificates are being fetched')
      return
    }
    const bucket = this.#sources.get(requester.source) ?? { tokens: burst, at: now }
    const tokens = Math.min(burst, bucket.tokens + (now - bucket.at) / refillMs)
    if (tokens < 1) throw new FeedbackThrottled('this source asked for too many new signing certificates', Math.ceil((1 - tokens) * refillMs / 1000))
    if (this.#fetching.size >= CERT_FETCHES_IN_FLIGHT) throw new FeedbackUnavailable('certificate-pending', 'too many signing certificates are being fetched')
    this.#sources.set(requester.source, { tokens: tokens - 1, at: now })
  }

  async #fetch (id: string, url: CertificateUrl): Promise<KeyObject> {
    let key: KeyObject
    try {
      key = new X509Certificate(await this.#download(url)).publicKey
    } catch (error) {
      this.#failedUntil.set(id, this.#now() + FAILED_CERT_URL_MS)
      const reason = error instanceof Error ? error.message : String(error)
      this.#fetchFailed(url.href, reason)
      throw new FeedbackUnavailable('certificate-failed', `the signing certificate could not be fetched: ${reason}`)
    }
    this.#keys.set(id, { key, until: this.#now() + CERT_KEPT_MS })
    return key
  }

  async #download (url: CertificateUrl): Promise<Buffer> {
    return await new Promise<Buffer>((resolve, reject) => {
      // The host and path that were checked, as they were checked: no second parse of the URL.
      const request = httpsGet({ hostname: url.hostname, port: 443, path: url.pathname, signal: AbortSignal.timeout(this.#timeoutMs) }, (response) => {
        if (response.statusCode !== 200) {
          request.destroy()
          reject(new Error(`HTTP ${response.statusCode ?? 0}`))
          return
        }
        const chunks: Buffer[] = []
        let size = 0
        response.on('data', (chunk: Buffer) => {
          size += chunk.length
          if (size > CERT_MAX_BYTES) request.destroy(new Error(`larger than ${CERT_MAX_BYTES} bytes`))
          else chunks.push(chunk)
        })
        response.on('end', () => { resolve(Buffer.concat(chunks)) })
        // A body cut short (the deadline, the size bound, the peer) ends in close without end.
        response.on('close', () => { if (!response.complete) reject(new Error('the certificate body was cut short')) })
      })
      request.on('error', reject)
    })
  }
}
