import { X509Certificate, type KeyObject } from 'node:crypto'
import { get as httpsGet } from 'node:https'
import { LruMap } from 'toad-cache'
import { FeedbackUnavailable } from './refusals.js'

/** Bound on fetching one signing certificate, headers and body. */
const CERT_FETCH_TIMEOUT_MS = 5000
/** SNS's certificates are about 2 KB of PEM; a body past this is not one. */
export const CERT_MAX_BYTES = 16_384
/**
 * Certificate URLs fetched for the first time, per minute and process. SNS signs with a few
 * certificates, each fetched once; a stranger who knows a listed topic could otherwise make
 * the service fetch a made-up `.pem` from SNS's hosts with every request.
 */
export const NEW_CERT_URLS_PER_MINUTE = 10
/** A certificate URL whose fetch failed is not fetched again for this long. */
const FAILED_CERT_URL_MS = 60_000
/** Public keys kept, and failing URLs remembered (each a small object). */
const CERT_URLS_REMEMBERED = 1000

export interface SigningCertificatesOptions {
  now?: () => number
  /** Bound on one fetch (tests shorten it). */
  timeoutMs?: number
}

/**
 * The public keys of SNS's signing certificates, by URL: fetched over node:https (the
 * system's trust store, no redirect followed) within a deadline and a size bound, kept in a
 * bounded LRU, with concurrent requests for one URL sharing one fetch. New URLs are fetched
 * at most ten a minute and a URL that failed is not tried again for a minute: past either,
 * the message is answered as unavailable (SNS retries later) without a fetch.
 */
export class SigningCertificates {
  readonly #now: () => number
  readonly #timeoutMs: number
  readonly #keys = new LruMap<KeyObject>(CERT_URLS_REMEMBERED)
  readonly #failedUntil = new LruMap<number>(CERT_URLS_REMEMBERED)
  /** At most NEW_CERT_URLS_PER_MINUTE fetches at a time, each within the deadline. */
  readonly #fetching = new Map<string, Promise<KeyObject>>()
  #newUrlWindow = { startedAt: 0, fetches: 0 }

  constructor (options: SigningCertificatesOptions = {}) {
    this.#now = options.now ?? Date.now
    this.#timeoutMs = options.timeoutMs ?? CERT_FETCH_TIMEOUT_MS
  }

  /** The public key of the certificate at `url`, a URL already checked (see signingCertificateUrl). */
  async publicKey (url: URL): Promise<KeyObject> {
    const known = this.#keys.get(url.href)
    if (known !== undefined) return known
    const fetching = this.#fetching.get(url.href)
    if (fetching !== undefined) return await fetching
    this.#admitNewUrl(url.href)
    const fetch = this.#fetch(url)
    this.#fetching.set(url.href, fetch)
    try {
      return await fetch
    } finally {
      this.#fetching.delete(url.href)
    }
  }

  #admitNewUrl (href: string): void {
    const now = this.#now()
    const failedUntil = this.#failedUntil.get(href)
    if (failedUntil !== undefined && failedUntil > now) throw new FeedbackUnavailable('the signing certificate could not be fetched a moment ago')
    if (now - this.#newUrlWindow.startedAt >= 60_000) this.#newUrlWindow = { startedAt: now, fetches: 0 }
    if (this.#newUrlWindow.fetches >= NEW_CERT_URLS_PER_MINUTE) throw new FeedbackUnavailable('too many new signing certificate URLs this minute')
    this.#newUrlWindow.fetches++
  }

  async #fetch (url: URL): Promise<KeyObject> {
    let key: KeyObject
    try {
      key = new X509Certificate(await this.#download(url)).publicKey
    } catch (error) {
      this.#failedUntil.set(url.href, this.#now() + FAILED_CERT_URL_MS)
      throw new FeedbackUnavailable(`the signing certificate could not be fetched: ${error instanceof Error ? error.message : String(error)}`)
    }
    this.#keys.set(url.href, key)
    return key
  }

  async #download (url: URL): Promise<Buffer> {
    return await new Promise<Buffer>((resolve, reject) => {
      const request = httpsGet(url, { signal: AbortSignal.timeout(this.#timeoutMs) }, (response) => {
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
