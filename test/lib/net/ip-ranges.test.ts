import t from 'tap'
import ipaddr from 'ipaddr.js'
import { IpRangeSet } from '../../../lib/net/ip-ranges.js'
import { seededRandom } from '../../support/random.js'

function build (entries: string[]): IpRangeSet {
  const { set, rejected } = IpRangeSet.fromEntries(entries)
  if (rejected !== 0) throw new Error(`test setup: ${rejected} of ${JSON.stringify(entries)} rejected`)
  return set
}

// 94 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('IPv4 range edges', async (t) => {
  const set = build(['10.0.0.0/8', '192.168.1.0/24', '172.16.5.4/32'])
  t.ok(set.has('10.0.0.0'), 'first address')
  t.ok(set.has('10.255.255.255'), 'last address')
  t.ok(set.has('10.20.30.40'))
  t.notOk(set.has('9.255.255.255'), 'one before')
  t.notOk(set.has('11.0.0.0'), 'one after')
  t.ok(set.has('192.168.1.0'))
  t.ok(set.has('192.168.1.255'))
  t.notOk(set.has('192.168.0.255'))
  t.notOk(set.has('192.168.2.0'))
  t.ok(set.has('172.16.5.4'), '/32')
  t.notOk(set.has('172.16.5.3'))
  t.notOk(set.has('172.16.5.5'))
  t.notOk(set.has('1.1.1.1'))
  t.notOk(set.has('255.255.255.255'))
  t.notOk(set.has('0.0.0.0'))
})

t.test('IPv6 range edges, including prefixes that end inside a 32-bit word', async (t) => {
  const set = build(['2001:db8::/32', '2a00:1450:4001::/48', '2a02:6b8::/33', '2c0f:f000::/65', '2600::/97', '2400::1/128'])
  t.ok(set.has('2001:db8::'), 'first address')
  t.ok(set.has('2001:db8:ffff:ffff:ffff:ffff:ffff:ffff'), 'last address')
  t.notOk(set.has('2001:db7:ffff:ffff:ffff:ffff:ffff:ffff'), 'one before')
  t.notOk(set.has('2001:db9::'), 'one after')
  t.ok(set.has('2a00:1450:4001:ffff:ffff:ffff:ffff:ffff'))
  t.notOk(set.has('2a00:1450:4002::'))
  t.ok(set.has('2a02:6b8:7fff:ffff:ffff:ffff:ffff:ffff'), '/33 last')
  t.notOk(set.has('2a02:6b8:8000::'), '/33 one after')
  t.ok(set.has('2c0f:f000:0:0:7fff:ffff:ffff:ffff'), '/65 last')
  t.notOk(set.has('2c0f:f000:0:0:8000::'), '/65 one after')
  t.ok(set.has('2600::7fff:ffff'), '/97 last')
  t.notOk(set.has('2600::8000:0'), '/97 one after')
  t.ok(set.has('2400::1'), '/128')
  t.notOk(set.has('2400::'))
  t.notOk(set.has('2400::2'))
  t.notOk(set.has('::1'))
})

t.test('overlapping and adjacent ranges are merged', async (t) => {
  const v4 = build([
    '10.0.0.128/25', '10.0.0.0/25', // adjacent, given out of order
    '10.0.1.0/24', // adjacent to both
    '10.0.0.64/26', // inside
    '10.0.3.0/24', // a gap before it
    '20.0.0.0/8', '20.5.0.0/16', '20.200.0.0/16' // contained ranges must not shorten the first
  ])
  t.equal(v4.size, 8)
  t.equal(v4.ipv4Ranges, 3)
  t.ok(v4.has('10.0.0.127'))
  t.ok(v4.has('10.0.0.128'))
  t.ok(v4.has('10.0.1.255'))
  t.notOk(v4.has('10.0.2.0'), 'the gap')
  t.ok(v4.has('10.0.3.0'))
  t.ok(v4.has('20.255.255.255'))
  t.notOk(v4.has('21.0.0.0'))

  const v6 = build([
    '2001:db8:0:1::/64', '2001:db8::/64', '2001:db8::/48', // the /48 contains the /64s
    '2001:db8:0:5::/64',
    '2001:db8:1::/48', // adjacent to the /48
    '2001:db8:3::/48' // a gap before it
  ])
  t.equal(v6.ipv6Ranges, 2)
  t.ok(v6.has('2001:db8:0:ffff:ffff:ffff:ffff:ffff'))
  t.ok(v6.has('2001:db8:1::'))
  t.ok(v6.has('2001:db8:1:ffff:ffff:ffff:ffff:ffff'))
  t.notOk(v6.has('2001:db8:2::'), 'the gap')
  t.ok(v6.has('2001:db8:3::'))
  t.notOk(v6.has('2001:db8:4::'))

  t.equal(build(['2001:db8:0:1::/64', '2001:db8::/64']).ipv6Ranges, 1, 'adjacent /64s')
  const carry = build(['2001:db8:0:0:ffff:ffff:ffff:ffff/128', '2001:db8:0:1::/128'])
  t.equal(carry.ipv6Ranges, 1, 'x:ffff:ffff:ffff:ffff + 1 carries into the next group')
  const noCarry = build(['2001:db8:0:0:ffff:ffff:ffff:fffe/128', '2001:db8:0:1::/128'])
  t.equal(noCarry.ipv6Ranges, 2)
  const duplicates = build(['1.2.3.4', '1.2.3.4/32', '::ffff:1.2.3.4'])
  t.equal(duplicates.size, 3, 'size counts accepted entries')
  t.equal(duplicates.ipv4Ranges, 1)
})

t.test('/0 covers its family only', async (t) => {
  const v4 = build(['0.0.0.0/0'])
  for (const address of ['0.0.0.0', '255.255.255.255', '8.8.8.8', '::ffff:8.8.8.8']) t.ok(v4.has(address), address)
  t.notOk(v4.has('2001:db8::1'))
  const v6 = build(['::/0'])
  for (const address of ['::', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '2001:db8::1']) t.ok(v6.has(address), address)
  t.notOk(v6.has('8.8.8.8'))
})

t.test('the top of each address space does not overflow', async (t) => {
  const set = build(['255.255.255.255/32', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128', '255.255.255.0/24'])
  t.ok(set.has('255.255.255.255'))
  t.ok(set.has('255.255.255.0'))
  t.notOk(set.has('255.255.254.255'))
  t.ok(set.has('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'))
  t.notOk(set.has('ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe'))
  t.equal(set.ipv4Ranges, 1)
})

t.test('IPv4-mapped IPv6 queries and entries meet IPv4 ranges', async (t) => {
  const set = build(['1.2.3.0/24', '::ffff:5.6.7.0/120', '::ffff:9.9.9.9', '::ffff:0:0/95'])
  t.ok(set.has('::ffff:1.2.3.9'))
  t.ok(set.has('::ffff:102:3ff'))
  t.notOk(set.has('::ffff:1.2.4.0'))
  t.ok(set.has('5.6.7.8'), 'mapped /120 is IPv4 /24')
  t.ok(set.has('5.6.7.255'))
  t.notOk(set.has('5.6.8.0'))
  t.ok(set.has('9.9.9.9'), 'mapped address is IPv4 /32')
  t.notOk(set.has('9.9.9.10'))
  // Shorter than /96 it reaches beyond the mapped block, so it stays an IPv6 range.
  t.ok(set.has('::fffe:0:1'))
  t.notOk(set.has('10.0.0.1'))
  t.equal(set.ipv4Ranges, 3)

  const compatible = build(['::9.8.7.6', 'fe80::1%eth0'])
  t.ok(compatible.has('::908:706'), 'IPv4-compatible stays IPv6')
  t.notOk(compatible.has('9.8.7.6'))
  t.ok(compatible.has('fe80::1%br-1a2b'), 'zone ids are ignored in entries and queries')
  t.equal(compatible.ipv4Ranges, 0)
})

t.test('host bits under the prefix are ignored', async (t) => {
  const set = build(['10.1.2.3/8', '2001:db8:1:2:3:4:5:6/32'])
  t.ok(set.has('10.0.0.0'))
  t.ok(set.has('10.255.255.255'))
  t.ok(set.has('2001:db8::'))
})

t.test('invalid entries are counted, not thrown', async (t) => {
  const invalid = [
    '', 'foo', '1.2.3', '1.2.3.4/33', '1.2.3.4/', '/24', '1.2.3.4/-1', '1.2.3.4/2a', '1.2.3.4/1.5',
    '1.2.3.4/0024', '::/129', '2001:db8::/64/64', '010.0.0.0/8', '256.0.0.0/8', '1.2.3.4 5.6.7.8',
    'ExitNode ABCDEF', '2001:db8:::/48', '::ffff:1.2.3.4/129', '127.1', '0x7f.0.0.0/8', '::ffff:010.0.0.1',
    '::ffff:10.0.0/120'
  ]
  const valid = ['1.2.3.4', ' 5.6.7.0/24 ', '2001:db8::/32', '::1', '0.0.0.0/0', '1.2.3.4/032']
  const { set, rejected } = IpRangeSet.fromEntries([...invalid, ...valid])
  t.equal(rejected, invalid.length)
  t.equal(set.size, valid.length)
  t.ok(set.has('5.6.7.200'), 'surrounding whitespace is trimmed')
})

t.test('lookups of non-addresses and empty sets answer false', async (t) => {
  const set = build(['0.0.0.0/0', '::/0'])
  for (const raw of ['', 'x', '1.2.3', '1.2.3.4/32', '[::1]', '010.0.0.1']) t.notOk(set.has(raw), JSON.stringify(raw))
  const empty = IpRangeSet.fromEntries([]).set
  t.equal(empty.size, 0)
  t.notOk(empty.has('1.2.3.4'))
  t.notOk(empty.has('::1'))
})

const V6_MAX = (1n << 128n) - 1n

function v6Groups (value: bigint): number[] {
  const groups: number[] = []
  for (let shift = 112n; shift >= 0n; shift -= 16n) groups.push(Number((value >> shift) & 0xffffn))
  return groups
}

function v6ToText (value: bigint): string {
  return v6Groups(value).map((group) => group.toString(16)).join(':')
}

function v4ToText (value: number): string {
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.')
}

/**
 * The reference: one hash set of networks per prefix length, probed at every length. A
 * different algorithm over a different parser (ipaddr.js), so the two cannot share a bug.
 */
class NaiveReference {
  readonly v4 = new Map<number, Set<number>>()
  readonly v6 = new Map<number, Set<bigint>>()

  add (cidr: string): { first: bigint, last: bigint, family: 4 | 6 } {
    const [address, length] = ipaddr.parseCIDR(cidr)
    if (address.kind() === 'ipv4') {
      const value = address.toByteArray().reduce((sum, byte) => sum * 256 + byte, 0)
      const block = 2 ** (32 - length)
      const network = Math.floor(value / block) * block
      this.#bucket(this.v4, length).add(network)
      return { first: BigInt(network), last: BigInt(network + block - 1), family: 4 }
    }
    const value = address.toByteArray().reduce((sum, byte) => (sum << 8n) | BigInt(byte), 0n)
    const hostBits = BigInt(128 - length)
    const network = (value >> hostBits) << hostBits
    this.#bucket(this.v6, length).add(network)
    return { first: network, last: network | ((1n << hostBits) - 1n), family: 6 }
  }

  has (address: string): boolean {
    let parsed = ipaddr.parse(address)
    if (parsed instanceof ipaddr.IPv6 && parsed.isIPv4MappedAddress()) parsed = parsed.toIPv4Address()
    if (parsed.kind() === 'ipv4') {
      const value = parsed.toByteArray().reduce((sum, byte) => sum * 256 + byte, 0)
      for (const [length, networks] of this.v4) {
        const block = 2 ** (32 - length)
        if (networks.has(Math.floor(value / block) * block)) return true
      }
      return false
    }
    const value = parsed.toByteArray().reduce((sum, byte) => (sum << 8n) | BigInt(byte), 0n)
    for (const [length, networks] of this.v6) {
      const hostBits = BigInt(128 - length)
      if (networks.has((value >> hostBits) << hostBits)) return true
    }
    return false
  }

  #bucket<T> (map: Map<number, Set<T>>, length: number): Set<T> {
    let set = map.get(length)
    if (set === undefined) {
      set = new Set()
      map.set(length, set)
    }
    return set
  }
}

t.test('500,000 random prefixes agree with a naive reference', async (t) => {
  const seed = Number(process.env.IP_RANGES_SEED ?? Date.now() % 2 ** 31)
  t.comment(`seed ${seed} (replay with IP_RANGES_SEED=${seed})`)
  const random = seededRandom(seed)
  const int = (n: number): number => Math.floor(random() * n)
  // Sizes are drawn so that random probes hit about half the time and ranges often nest and
  // overlap: IPv6 lives in sixteen /32s (four heads, second group 0-3), IPv4 gets few short prefixes.
  const v6Heads = [0x2001, 0x2a00, 0x2600, 0x2c0f]
  const randomV6 = (): bigint => (BigInt(v6Heads[int(v6Heads.length)] as number) << 112n) | (BigInt(int(4)) << 96n) |
    (BigInt(int(2 ** 32)) << 64n) | (BigInt(int(2 ** 32)) << 32n) | BigInt(int(2 ** 32))

  const entries: string[] = []
  for (let i = 0; i < 500_000; i++) {
    const roll = random()
    if (random() < 0.75) {
      const address = v4ToText(int(2 ** 32))
      entries.push(roll < 0.2 ? address : `${address}/${roll < 0.2005 ? 8 + int(8) : 16 + int(17)}`)
    } else {
      // Compressed text, as lists have it, rather than the eight groups the probes use.
      const address = new ipaddr.IPv6(v6Groups(randomV6())).toString()
      entries.push(roll < 0.2 ? address : `${address}/${40 + int(89)}`)
    }
  }

  const { set, rejected } = IpRangeSet.fromEntries(entries)
  t.equal(rejected, 0)
  t.equal(set.size, entries.length)

  const reference = new NaiveReference()
  const spans = entries.map((entry) => reference.add(entry.includes('/') ? entry : `${entry}/${entry.includes(':') ? 128 : 32}`))

  const probes: string[] = []
  for (let i = 0; i < 1000; i++) {
    const { first, last, family } = spans[int(spans.length)] as (typeof spans)[number]
    const top = family === 4 ? 2n ** 32n - 1n : V6_MAX
    const render = (value: bigint): string => family === 4 ? v4ToText(Number(value)) : v6ToText(value)
    probes.push(render(first), render(last))
    if (first > 0n) probes.push(render(first - 1n))
    if (last < top) probes.push(render(last + 1n))
  }
  for (let i = 0; i < 1000; i++) {
    probes.push(v4ToText(int(2 ** 32)))
    probes.push(v6ToText(randomV6()))
    probes.push(`::ffff:${v4ToText(int(2 ** 32))}`)
  }

  const mismatches: string[] = []
  let hits = 0
  for (const probe of probes) {
    const expected = reference.has(probe)
    if (expected) hits++
    if (set.has(probe) !== expected) mismatches.push(`${probe}: expected ${expected}`)
  }
  t.ok(probes.length >= 6000, `${probes.length} probes`)
  t.ok(hits > probes.length / 4 && hits < (probes.length * 3) / 4, `probes mix hits (${hits}) and misses`)
  t.strictSame(mismatches.slice(0, 20), [], `${mismatches.length} mismatches`)
})
