/*
 * IpRangeSet at block-list scale: build time, memory and lookup rate for 500,000 mixed
 * IPv4/IPv6 prefixes. Run after `npx tsc -p tsconfig.build.json`:
 *
 *   node --expose-gc dist/bench/blocklist.js
 *
 * (without --expose-gc the memory figures include garbage not yet collected).
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { IpRangeSet } from '../lib/net/ip-ranges.js'
import { normalizeAddress } from '../lib/net/source-address.js'
import { seededRandom } from '../test/support/random.js'

const PREFIXES = 500_000
const IPV6_SHARE = 0.2
const PROBES = 1_000_000

const random = seededRandom(20240501)
const int = (n: number): number => Math.floor(random() * n)

function v4Text (value: number): string {
  return `${value >>> 24}.${(value >>> 16) & 255}.${(value >>> 8) & 255}.${value & 255}`
}

function v6Text (words: readonly number[]): string {
  return words.map((word) => `${(word >>> 16).toString(16)}:${(word & 0xffff).toString(16)}`).join(':')
}

/** The bits of the `index`th 32-bit word that lie below a prefix of `length` bits. */
function hostBits (length: number, index: number): number {
  const kept = Math.min(32, Math.max(0, length - index * 32))
  return kept === 32 ? 0 : 0xffffffff >>> kept
}

// Shaped like real proxy/hosting lists: many single addresses and /24s in IPv4, provider
// allocations (/32 to /48), customer /64s and single addresses in IPv6.
const V4_LENGTHS = [32, 32, 32, 32, 24, 24, 24, 22, 20, 16]
const V6_LENGTHS = [128, 128, 64, 64, 64, 56, 48, 48, 40, 32]

/** Somewhere in 2000::/4, where the global unicast allocations are. */
const randomV6 = (): number[] => [0x2000_0000 + int(2 ** 28), int(2 ** 32), int(2 ** 32), int(2 ** 32)]
const v4Inside = (network: number, length: number): number => network + int(2 ** (32 - length))
const v6Inside = (network: readonly number[], length: number): number[] =>
  network.map((word, index) => ((word & ~hostBits(length, index)) | (int(2 ** 32) & hostBits(length, index))) >>> 0)

interface V4Entry { network: number, length: number }
interface V6Entry { network: number[], length: number }
const v4Entries: V4Entry[] = []
const v6Entries: V6Entry[] = []
const lines: string[] = []
for (let i = 0; i < PREFIXES; i++) {
  if (random() < IPV6_SHARE) {
    const length = V6_LENGTHS[int(V6_LENGTHS.length)] as number
    const network = randomV6().map((word, index) => (word & ~hostBits(length, index)) >>> 0)
    v6Entries.push({ network, length })
    // Compressed, as lists write them ("2a00:1450:4001::/48").
    lines.push(`${normalizeAddress(v6Text(network)) ?? ''}/${length}`)
  } else {
    const length = V4_LENGTHS[int(V4_LENGTHS.length)] as number
    const block = 2 ** (32 - length)
    const network = Math.floor(int(2 ** 32) / block) * block
    v4Entries.push({ network, length })
    lines.push(length === 32 ? v4Text(network) : `${v4Text(network)}/${length}`)
  }
}

// As a list file arrives: one text split into lines. (The template strings above are trees of
// fragments that V8 flattens on first read, which would distort the memory figures.)
const entries = lines.join('\n').split('\n')

const gc = (globalThis as { gc?: () => void }).gc
async function memory (): Promise<{ heapUsed: number, arrayBuffers: number }> {
  if (gc !== undefined) {
    gc()
    // Typed array memory is released by a concurrent sweeper; let it finish before reading.
    await sleep(50)
    gc()
  }
  const { heapUsed, arrayBuffers } = process.memoryUsage()
  return { heapUsed, arrayBuffers }
}

const before = await memory()
const started = performance.now()
const { set, rejected } = IpRangeSet.fromEntries(entries)
const buildMs = performance.now() - started
const after = await memory()

// Hits are drawn from inside random entries; random probes mostly miss.
const perCategory = PROBES / 5
const v4Hits: string[] = []
const v4Random: string[] = []
const v6Hits: string[] = []
const v6Random: string[] = []
const mappedHits: string[] = []
for (let i = 0; i < perCategory; i++) {
  const v4 = v4Entries[int(v4Entries.length)] as V4Entry
  const v6 = v6Entries[int(v6Entries.length)] as V6Entry
  v4Hits.push(v4Text(v4Inside(v4.network, v4.length)))
  v4Random.push(v4Text(int(2 ** 32)))
  v6Hits.push(v6Text(v6Inside(v6.network, v6.length)))
  v6Random.push(v6Text(randomV6()))
  mappedHits.push(`::ffff:${v4Text(v4Inside(v4.network, v4.length))}`)
}
const categories = [
  { name: 'IPv4 inside an entry', probes: v4Hits },
  { name: 'IPv4 random', probes: v4Random },
  { name: 'IPv6 inside an entry', probes: v6Hits },
  { name: 'IPv6 random', probes: v6Random },
  { name: 'IPv4-mapped inside an entry', probes: mappedHits }
]

/** Lookups per second over the probes: the median of three passes, after one untimed pass. */
function measure (probes: readonly string[]): { rate: number, hits: number } {
  let hits = 0
  const rates: number[] = []
  for (let pass = 0; pass < 4; pass++) {
    hits = 0
    const start = performance.now()
    for (const probe of probes) if (set.has(probe)) hits++
    if (pass > 0) rates.push(probes.length / ((performance.now() - start) / 1000))
  }
  return { rate: rates.sort((a, b) => a - b)[1] as number, hits }
}

const mib = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MiB`
const rows: Array<[string, string]> = [
  ['prefixes', `${set.size.toLocaleString('en')} (${rejected} rejected)`],
  ['merged ranges', `${set.ipv4Ranges.toLocaleString('en')} IPv4, ${set.ipv6Ranges.toLocaleString('en')} IPv6`],
  ['build', `${buildMs.toFixed(0)} ms`],
  ['heap used', `${mib(after.heapUsed)}, of which the set ${mib(after.heapUsed - before.heapUsed)}`],
  ['typed arrays', `${mib(after.arrayBuffers)}, of which the set ${mib(after.arrayBuffers - before.arrayBuffers)} (ranges: ${mib(set.ipv4Ranges * 8 + set.ipv6Ranges * 32)})`]
]
const all: string[] = categories.flatMap(({ probes }) => probes)
for (let i = all.length - 1; i > 0; i--) {
  const j = int(i + 1)
  const swap = all[i] as string
  all[i] = all[j] as string
  all[j] = swap
}
for (const { name, probes } of [...categories, { name: 'all, shuffled', probes: all }]) {
  gc?.()
  const { rate, hits } = measure(probes)
  rows.push([`lookups: ${name}`, `${Math.round(rate).toLocaleString('en')}/s over ${probes.length.toLocaleString('en')} (${((hits / probes.length) * 100).toFixed(0)}% hits)`])
}

const width = Math.max(...rows.map(([label]) => label.length))
process.stdout.write(`IpRangeSet, ${PREFIXES.toLocaleString('en')} prefixes (${IPV6_SHARE * 100}% IPv6), node ${process.version}\n`)
for (const [label, value] of rows) process.stdout.write(`  ${label.padEnd(width)}  ${value}\n`)
if (gc === undefined) process.stdout.write('  (memory figures include uncollected garbage; run with --expose-gc)\n')
