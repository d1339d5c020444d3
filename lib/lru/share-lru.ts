import { LruMap } from 'toad-cache'

/**
 * An in-process LRU map split into shares, each with its own capacity: past it, a new entry
 * displaces the least recently used entry of its own share, never another share's. The caller
 * names the shares (a tenant's scope and a kind of counter, say) from a set the configuration
 * bounds, so memory is bounded by shares × capacity, and one party flooding its share with
 * new entries cannot make the process forget anyone else's. Each share is a toad-cache LRU,
 * the cache @fastify/rate-limit's own in-memory store uses.
 */
export class ShareLru<V> {
  readonly #entriesPerShare: number
  readonly #shares = new Map<string, LruMap<V>>()

  constructor (entriesPerShare: number) {
    this.#entriesPerShare = entriesPerShare
  }

  /** The entry, made the most recently used of its share. */
  get (share: string, key: string): V | undefined {
    return this.#shares.get(share)?.get(key)
  }

  set (share: string, key: string, value: V): void {
    let entries = this.#shares.get(share)
    if (entries === undefined) {
      entries = new LruMap<V>(this.#entriesPerShare)
      this.#shares.set(share, entries)
    }
    entries.set(key, value)
  }

  delete (share: string, key: string): void {
    this.#shares.get(share)?.delete(key)
  }

  /** Entries held in one share. */
  size (share: string): number {
    return this.#shares.get(share)?.size ?? 0
  }
}
