import { createHash, createHmac, createSecretKey, type Hash, type Hmac, type KeyObject } from 'node:crypto'

/** What the SDK hashes: its SourceData. */
type SourceData = string | ArrayBuffer | ArrayBufferView

/**
 * Secrets seen, as KeyObjects. SigV4 HMACs with few keys (its signing key changes once a day
 * and per region), so a handful of entries; the oldest goes first past the bound.
 */
const KEY_CACHE_SIZE = 16
const keys = new Map<string, KeyObject>()

function bytesOf (data: SourceData, encoding?: BufferEncoding): Buffer {
  if (typeof data === 'string') return Buffer.from(data, encoding ?? 'utf8')
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength)
  return Buffer.from(data)
}

function keyOf (secret: SourceData): KeyObject {
  const bytes = bytesOf(secret)
  // By content, not by identity: a key is never mistaken for another one that shares its buffer.
  const id = bytes.toString('latin1')
  let key = keys.get(id)
  if (key === undefined) {
    key = createSecretKey(Buffer.from(bytes))
    if (keys.size >= KEY_CACHE_SIZE) keys.delete(keys.keys().next().value as string)
    keys.set(id, key)
  }
  return key
}

/**
 * The AWS SDK's SHA-256 and HMAC-SHA256 (its `sha256` option) with each HMAC secret made into
 * a KeyObject once. The SDK's own hands `createHmac` a Buffer on every call, which on Node 24
 * builds a key object each time (about 5× the cost of the HMAC itself): SigV4 signs every
 * request with HMACs.
 */
export class KeyedSha256 {
  readonly digestLength = 32
  readonly #key: KeyObject | null
  #hash: Hash | Hmac

  constructor (secret?: SourceData) {
    this.#key = secret === undefined ? null : keyOf(secret)
    this.#hash = this.#start()
  }

  #start (): Hash | Hmac {
    return this.#key === null ? createHash('sha256') : createHmac('sha256', this.#key)
  }

  update (data: SourceData, encoding?: BufferEncoding): void {
    if (typeof data === 'string') this.#hash.update(data, encoding ?? 'utf8')
    else this.#hash.update(bytesOf(data))
  }

  async digest (): Promise<Uint8Array> {
    const digest = this.#hash.digest()
    return new Uint8Array(digest.buffer, digest.byteOffset, digest.byteLength)
  }

  reset (): void {
    this.#hash = this.#start()
  }
}
