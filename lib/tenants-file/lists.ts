import { createHash } from 'node:crypto'
import type { LoadTurns } from './turns.js'

/** Entries hashed together, as one unit each: hashing is cheap beside a check or a parse. */
const DIGEST_SLICE = 256

/**
 * What one load of the tenants file made of each list in it (a tenant's blocked networks, its
 * denied domains, a key's origins: their schema problems, their sets), by a digest of the list's
 * entries, as CheckedParts keeps template parts. A load given the one before (`earlier`) takes
 * every list whose entries are unchanged from it, so a reload for one tenant's change costs
 * another tenant's 100,000 networks a hash of them, not a parse.
 */
export class BuiltLists {
  readonly #earlier: ReadonlyMap<string, unknown>
  readonly #now = new Map<string, unknown>()
  /** The same array is hashed once per load, whatever asks for it. */
  readonly #digests = new WeakMap<readonly unknown[], string>()
  /** Lists this load checked or built. */
  built = 0
  /** Lists this load took, unchanged, from the one before. */
  reused = 0

  /** `earlier`: the previous load's lists. */
  constructor (earlier: BuiltLists | null = null) {
    this.#earlier = earlier === null ? new Map() : earlier.#now
  }

  /** What `build` makes of `list` for `purpose`, from this load or the one before when either built it from the same entries. */
  * get<T> (purpose: string, list: readonly unknown[], turns: LoadTurns, build: () => Generator<void, T, void>): Generator<void, T, void> {
    const key = `${purpose}\u0000${yield * this.#digest(list, turns)}`
    if (this.#now.has(key)) return this.#now.get(key) as T
    let found: T
    if (this.#earlier.has(key)) {
      found = this.#earlier.get(key) as T
      this.reused++
    } else {
      found = yield * build()
      this.built++
    }
    this.#now.set(key, found)
    return found
  }

  * #digest (list: readonly unknown[], turns: LoadTurns): Generator<void, string, void> {
    const known = this.#digests.get(list)
    if (known !== undefined) return known
    const hash = createHash('sha256')
    for (let start = 0; start < list.length; start += DIGEST_SLICE) {
      const slice = list.slice(start, start + DIGEST_SLICE)
      yield * turns.take(slice.length)
      hash.update(JSON.stringify(slice)).update('\n')
    }
    const digest = `${list.length}:${hash.digest('base64')}`
    this.#digests.set(list, digest)
    return digest
  }
}
