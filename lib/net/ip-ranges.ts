import ipaddr from 'ipaddr.js'
import { ipv4Value, parseAddress, parseIP } from './source-address.js'

/*
 * Layout. Each family is a list of sorted, merged, non-overlapping inclusive ranges, searched
 * by bisection, so a lookup costs about 19 comparisons at 500,000 ranges and nothing is
 * allocated besides the parse of the queried address.
 *
 * IPv4 bounds are plain unsigned 32-bit numbers in two Uint32Arrays.
 *
 * IPv6 bounds are four 32-bit words per address, stored consecutively in two Uint32Arrays,
 * compared word by word. BigInt (or BigUint64Array halves, which hand out BigInts on every
 * read) would make each of those comparisons a call into the BigInt runtime and allocate
 * heap objects per lookup; 32-bit words stay small integers that V8 keeps unboxed, and the
 * typed arrays cost 32 bytes per range with nothing for the garbage collector to trace.
 */

const WORDS = 4
/** Per IPv6 entry while building: four words of the network, then the prefix length. */
const STRIDE = WORDS + 1

/** Adds entries one at a time (`add`: false for one that is not an address or a CIDR), then builds the set once. */
export interface IpRangeSetBuilder {
  add: (entry: string) => boolean
  build: () => IpRangeSetBuild
  /**
   * The same build a step at a time: each step yields the units of work it is about to do
   * (about one per entry sorted, merged or copied), so that a caller can pause between them.
   */
  steps: () => Generator<number, IpRangeSetBuild, void>
}

/** Entries sorted in one step before the sorted runs are merged, as many per step. */
const RUN = 1024

export interface IpRangeSetBuild {
  set: IpRangeSet
  /** Entries that were not an address or a CIDR. */
  rejected: number
}

/** An immutable set of IPv4 and IPv6 ranges, answering membership for single addresses. */
export class IpRangeSet {
  /** Entries accepted when the set was built (duplicates and overlaps included). */
  readonly size: number
  /** Ranges left after merging, per family. */
  readonly ipv4Ranges: number
  readonly ipv6Ranges: number
  readonly #v4Starts: Uint32Array
  readonly #v4Ends: Uint32Array
  readonly #v6Starts: Uint32Array
  readonly #v6Ends: Uint32Array

  private constructor (size: number, v4: [Uint32Array, Uint32Array], v6: [Uint32Array, Uint32Array]) {
    this.size = size
    this.#v4Starts = v4[0]
    this.#v4Ends = v4[1]
    this.#v6Starts = v6[0]
    this.#v6Ends = v6[1]
    this.ipv4Ranges = v4[0].length
    this.ipv6Ranges = v6[0].length / WORDS
  }

  /**
   * Builds a set from addresses and CIDRs, IPv4 or IPv6. Host bits under the prefix are
   * ignored (10.1.2.3/8 is 10.0.0.0/8), as most published lists contain such lines.
   * IPv4-mapped IPv6 ranges of /96 or longer become the IPv4 ranges they denote, since
   * mapped queries are looked up as IPv4. Invalid entries are counted, not thrown.
   */
  static fromEntries (entries: Iterable<string>): IpRangeSetBuild {
    const builder = IpRangeSet.builder()
    for (const entry of entries) builder.add(entry)
    return builder.build()
  }

  /** The same as fromEntries, an entry at a time: a caller can let the event loop turn between entries. */
  static builder (): IpRangeSetBuilder {
    // The network address times 64 plus the prefix length stays below 2^38, exact in a double,
    // so IPv4 entries sort as one Float64Array with the native comparator-free sort.
    const v4Keys: number[] = []
    const v6Words: number[] = []
    let accepted = 0
    let rejected = 0
    return {
      add (raw: string): boolean {
        const entry = raw.trim()
        const slash = entry.indexOf('/')
        const address = parseIP(slash === -1 ? entry : entry.slice(0, slash))
        const bits = address instanceof ipaddr.IPv4 ? 32 : 128
        const length = address === null ? -1 : slash === -1 ? bits : parsePrefixLength(entry.slice(slash + 1), bits)
        if (address === null || length === -1) {
          rejected++
          return false
        }
        if (address instanceof ipaddr.IPv4) {
          v4Keys.push(v4Key(ipv4Value(address), length))
        } else if (length >= 96 && address.isIPv4MappedAddress()) {
          v4Keys.push(v4Key(ipv4Value(address.toIPv4Address()), length - 96))
        } else {
          pushV6Network(v6Words, address.parts, length)
        }
        accepted++
        return true
      },
      build (): IpRangeSetBuild {
        const steps = this.steps()
        for (let step = steps.next(); ; step = steps.next()) if (step.done === true) return step.value
      },
      * steps (): Generator<number, IpRangeSetBuild, void> {
        const v4 = yield * mergeV4(v4Keys)
        const v6 = yield * mergeV6(v6Words)
        return { set: new IpRangeSet(accepted, v4, v6), rejected }
      }
    }
  }

  /** Whether the address lies in one of the ranges; false for anything that is not an address. */
  has (address: string): boolean {
    const parsed = parseAddress(address)
    if (parsed === null) return false
    if (parsed.kind === 'ipv4') return this.#hasV4(parsed.value)
    const p = parsed.parts
    return this.#hasV6(
      (p[0] as number) * 65536 + (p[1] as number),
      (p[2] as number) * 65536 + (p[3] as number),
      (p[4] as number) * 65536 + (p[5] as number),
      (p[6] as number) * 65536 + (p[7] as number)
    )
  }

  #hasV4 (value: number): boolean {
    const starts = this.#v4Starts
    let low = 0
    let high = starts.length - 1
    let found = -1
    while (low <= high) {
      const middle = (low + high) >>> 1
      if ((starts[middle] as number) <= value) {
        found = middle
        low = middle + 1
      } else {
        high = middle - 1
      }
    }
    return found !== -1 && value <= (this.#v4Ends[found] as number)
  }

  #hasV6 (q0: number, q1: number, q2: number, q3: number): boolean {
    const starts = this.#v6Starts
    let low = 0
    let high = starts.length / WORDS - 1
    let found = -1
    while (low <= high) {
      const middle = (low + high) >>> 1
      if (compareToWords(starts, middle * WORDS, q0, q1, q2, q3) <= 0) {
        found = middle
        low = middle + 1
      } else {
        high = middle - 1
      }
    }
    return found !== -1 && compareToWords(this.#v6Ends, found * WORDS, q0, q1, q2, q3) >= 0
  }
}

/**
 * A prefix length of at most `bits`, or -1. Digits only, as Number() would also take " 24",
 * "0x18" and "2e1"; three at most, since more can only be zero padding no list writes.
 */
function parsePrefixLength (text: string, bits: number): number {
  if (!/^\d{1,3}$/.test(text)) return -1
  const length = Number(text)
  return length <= bits ? length : -1
}

function v4Key (address: number, length: number): number {
  const block = 2 ** (32 - length)
  return Math.floor(address / block) * block * 64 + length
}

/** `values` copied into `into`, RUN a step. */
function * copyInSteps<T extends Float64Array | Uint32Array> (values: readonly number[], into: T): Generator<number, T, void> {
  for (let start = 0; start < values.length; start += RUN) {
    const end = Math.min(start + RUN, values.length)
    yield end - start
    for (let i = start; i < end; i++) into[i] = values[i] as number
  }
  return into
}

/**
 * Sorts `items` by `compare` (numerically without it) a run of RUN at a time, then merges the
 * runs pairwise RUN items a step, yielding before each step the items it handles: one sort of
 * 100,000 IPv6 networks with their comparator is about 100 ms of CPU.
 */
function * sortInSteps<T extends Float64Array | Uint32Array> (items: T, compare: ((a: number, b: number) => number) | null, empty: (length: number) => T): Generator<number, T, void> {
  const before = compare ?? ((a: number, b: number) => a - b)
  for (let start = 0; start < items.length; start += RUN) {
    const run = items.subarray(start, start + RUN)
    yield run.length
    if (compare === null) run.sort()
    else run.sort(compare)
  }
  let from = items
  let to = empty(items.length)
  for (let width = RUN; width < items.length; width *= 2) {
    for (let left = 0; left < items.length; left += 2 * width) {
      const middle = Math.min(left + width, items.length)
      const right = Math.min(left + 2 * width, items.length)
      let i = left
      let j = middle
      for (let out = left; out < right;) {
        const stop = Math.min(out + RUN, right)
        yield stop - out
        for (; out < stop; out++) {
          if (j >= right || (i < middle && before(from[i] as number, from[j] as number) <= 0)) to[out] = from[i++] as number
          else to[out] = from[j++] as number
        }
      }
    }
    const sorted = to
    to = from
    from = sorted
  }
  return from
}

function * mergeV4 (keys: number[]): Generator<number, [Uint32Array, Uint32Array], void> {
  const empty = (length: number): Float64Array => new Float64Array(length)
  const sorted = yield * sortInSteps(yield * copyInSteps(keys, empty(keys.length)), null, empty)
  const starts = new Uint32Array(sorted.length)
  const ends = new Uint32Array(sorted.length)
  let count = 0
  for (const [index, key] of sorted.entries()) {
    if (index % RUN === 0) yield Math.min(RUN, sorted.length - index)
    const length = key % 64
    const start = (key - length) / 64
    const end = start + 2 ** (32 - length) - 1
    // Adjacent ranges merge too (start === previous end + 1): fewer ranges, same answers.
    if (count > 0 && start <= (ends[count - 1] as number) + 1) {
      if (end > (ends[count - 1] as number)) ends[count - 1] = end
    } else {
      starts[count] = start
      ends[count] = end
      count++
    }
  }
  return [starts.slice(0, count), ends.slice(0, count)]
}

/** The mask of the `index`th 32-bit word under a prefix of `length` bits. */
function wordMask (length: number, index: number): number {
  const kept = Math.min(32, Math.max(0, length - index * 32))
  // A shift by 32 is a shift by 0 in JavaScript, hence the explicit zero.
  return kept === 0 ? 0 : (0xffffffff << (32 - kept)) >>> 0
}

function pushV6Network (out: number[], parts: readonly number[], length: number): void {
  for (let w = 0; w < WORDS; w++) {
    const word = (parts[2 * w] as number) * 65536 + (parts[2 * w + 1] as number)
    out.push((word & wordMask(length, w)) >>> 0)
  }
  out.push(length)
}

function * mergeV6 (collected: number[]): Generator<number, [Uint32Array, Uint32Array], void> {
  const empty = (length: number): Uint32Array => new Uint32Array(length)
  const entries = yield * copyInSteps(collected, empty(collected.length))
  const n = entries.length / STRIDE
  const order = yield * sortInSteps(yield * copyInSteps(Array.from({ length: n }, (_, i) => i), empty(n)), (a, b) => compareWords(entries, a * STRIDE, entries, b * STRIDE), empty)

  const starts = new Uint32Array(n * WORDS)
  const ends = new Uint32Array(n * WORDS)
  const end = new Uint32Array(WORDS)
  let count = 0
  for (const [position, index] of order.entries()) {
    if (position % RUN === 0) yield Math.min(RUN, n - position)
    const offset = index * STRIDE
    const length = entries[offset + WORDS] as number
    for (let w = 0; w < WORDS; w++) {
      end[w] = ((entries[offset + w] as number) | ~wordMask(length, w)) >>> 0
    }
    const last = (count - 1) * WORDS
    if (count > 0 && (compareWords(entries, offset, ends, last) <= 0 || isSuccessor(ends, last, entries, offset))) {
      if (compareWords(end, 0, ends, last) > 0) ends.set(end, last)
    } else {
      starts.set(entries.subarray(offset, offset + WORDS), count * WORDS)
      ends.set(end, count * WORDS)
      count++
    }
  }
  return [starts.slice(0, count * WORDS), ends.slice(0, count * WORDS)]
}

function compareWords (a: Uint32Array, aOffset: number, b: Uint32Array, bOffset: number): number {
  for (let w = 0; w < WORDS; w++) {
    const difference = (a[aOffset + w] as number) - (b[bOffset + w] as number)
    if (difference !== 0) return difference
  }
  return 0
}

/** The sign of (stored address at offset) minus (the queried words); unrolled for the lookup path. */
function compareToWords (a: Uint32Array, offset: number, q0: number, q1: number, q2: number, q3: number): number {
  const a0 = a[offset] as number
  if (a0 !== q0) return a0 - q0
  const a1 = a[offset + 1] as number
  if (a1 !== q1) return a1 - q1
  const a2 = a[offset + 2] as number
  if (a2 !== q2) return a2 - q2
  return (a[offset + 3] as number) - q3
}

/** Whether b is a + 1. */
function isSuccessor (a: Uint32Array, aOffset: number, b: Uint32Array, bOffset: number): boolean {
  // Adding one turns the trailing all-ones words of a into zeros and carries into the next.
  let w = WORDS - 1
  while (w >= 0 && a[aOffset + w] === 0xffffffff) {
    if (b[bOffset + w] !== 0) return false
    w--
  }
  if (w < 0) return false
  if (b[bOffset + w] !== (a[aOffset + w] as number) + 1) return false
  for (let above = 0; above < w; above++) {
    if (b[bOffset + above] !== a[aOffset + above]) return false
  }
  return true
}
