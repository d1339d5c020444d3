import t from 'tap'
import fc from 'fast-check'
import ipaddr from 'ipaddr.js'
import { normalizeAddress, parseAddress, parseIP, sourceBucket } from '../../../lib/net/source-address.js'

t.test('normalizeAddress keeps canonical IPv4', async (t) => {
  for (const address of ['1.2.3.4', '0.0.0.0', '255.255.255.255', '10.0.0.1', '192.168.100.200']) {
    t.equal(normalizeAddress(address), address)
  }
})

t.test('normalizeAddress renders IPv6 per RFC 5952', async (t) => {
  t.equal(normalizeAddress('2001:DB8:0:0:0:0:0:1'), '2001:db8::1')
  t.equal(normalizeAddress('2001:0db8:0000:0000:0001:0000:0000:0001'), '2001:db8::1:0:0:1')
  t.equal(normalizeAddress('::1'), '::1')
  t.equal(normalizeAddress('::'), '::')
  t.equal(normalizeAddress('fe80::ABCD'), 'fe80::abcd')
  t.equal(normalizeAddress('1:2:3:4:5:6:7:8'), '1:2:3:4:5:6:7:8')
})

t.test('normalizeAddress unwraps IPv4-mapped IPv6', async (t) => {
  t.equal(normalizeAddress('::ffff:1.2.3.4'), '1.2.3.4')
  t.equal(normalizeAddress('::FFFF:1.2.3.4'), '1.2.3.4')
  t.equal(normalizeAddress('::ffff:102:304'), '1.2.3.4')
  t.equal(normalizeAddress('0:0:0:0:0:ffff:c0a8:0101'), '192.168.1.1')
  t.equal(normalizeAddress('::ffff:255.255.255.255'), '255.255.255.255')
  // Not mapped: other prefixes in front of an embedded IPv4 stay IPv6.
  t.equal(normalizeAddress('64:ff9b::1.2.3.4'), '64:ff9b::102:304')
  t.equal(normalizeAddress('::ffff:0:1.2.3.4'), '::ffff:0:102:304')
  // IPv4-compatible (deprecated) is not mapped either, though ipaddr.js alone would read it so.
  t.equal(normalizeAddress('::1.2.3.4'), '::102:304')
})

t.test('normalizeAddress drops zone ids', async (t) => {
  t.equal(normalizeAddress('fe80::1%eth0'), 'fe80::1')
  t.equal(normalizeAddress('fe80::1%br-1a2b3c'), 'fe80::1')
  t.equal(normalizeAddress('fe80::1%25'), 'fe80::1')
  t.equal(normalizeAddress('::ffff:1.2.3.4%eth0'), '1.2.3.4')
})

t.test('normalizeAddress refuses garbage', async (t) => {
  const garbage = [
    '', ' ', 'abc', 'localhost', '1.2.3', '1.2.3.4.5', '256.1.1.1', '1.2.3.-1', '1..2.3',
    '.1.2.3', '1.2.3.', '01.2.3.4', '1.2.3.010', '0x7f.0.0.1', '127.1', '2130706433',
    ' 1.2.3.4', '1.2.3.4 ', '1.2.3.4/32', '1.2.3.4%eth0', 'fe80::1%', '[::1]', ':::', '1::2::3',
    '12345::', 'g::1', '1:2:3:4:5:6:7', '1:2:3:4:5:6:7:8:9', '::ffff:1.2.3.04', '::ffff:1.2.3',
    '::ffff:0x1.2.3.4', '2001:db8::/64'
  ]
  for (const raw of garbage) t.equal(normalizeAddress(raw), null, JSON.stringify(raw))
})

t.test('parseAddress reduces addresses to numbers', async (t) => {
  t.strictSame(parseAddress('0.0.0.0'), { kind: 'ipv4', value: 0 })
  t.strictSame(parseAddress('255.255.255.255'), { kind: 'ipv4', value: 4294967295 })
  t.strictSame(parseAddress('128.0.0.1'), { kind: 'ipv4', value: 2147483649 })
  t.strictSame(parseAddress('::ffff:1.2.3.4'), { kind: 'ipv4', value: 0x01020304 })
  t.strictSame(parseAddress('2001:db8::1%eth0'), { kind: 'ipv6', parts: [0x2001, 0xdb8, 0, 0, 0, 0, 0, 1] })
  t.strictSame(parseAddress('::1.2.3.4'), { kind: 'ipv6', parts: [0, 0, 0, 0, 0, 0, 0x102, 0x304] }, 'IPv4-compatible, not mapped')
  t.equal(parseAddress('1.2.3.256'), null)
})

t.test('parseIP reads every RFC 4291 text form of an address', async (t) => {
  const group = fc.integer({ min: 0, max: 0xffff })
  fc.assert(fc.property(
    fc.array(group, { minLength: 8, maxLength: 8 }), fc.boolean(), fc.boolean(), fc.boolean(),
    (parts, upper, padded, dottedTail) => {
      const address = new ipaddr.IPv6(parts)
      const forms = [address.toRFC5952String(), address.toNormalizedString()]
      const six = parts.slice(0, 6).map((part) => part.toString(16)).join(':')
      const v4 = `${(parts[6] ?? 0) >> 8}.${(parts[6] ?? 0) & 255}.${(parts[7] ?? 0) >> 8}.${(parts[7] ?? 0) & 255}`
      // The second dotted form compresses the head: the two ffff groups keep "::" out of the tail.
      const compressedSix = new ipaddr.IPv6([...parts.slice(0, 6), 0xffff, 0xffff]).toRFC5952String().replace(/ffff:ffff$/, '')
      if (dottedTail) forms.push(`${six}:${v4}`, `${compressedSix}${v4}`)
      for (const form of forms) {
        let text = padded ? form.split(':').map((piece) => piece === '' || piece.includes('.') ? piece : piece.padStart(4, '0')).join(':') : form
        if (upper) text = text.toUpperCase()
        const parsed = parseIP(text)
        if (!(parsed instanceof ipaddr.IPv6) || parsed.parts.join() !== parts.join()) throw new Error(`${text} read as ${String(parsed)}`)
      }
    }
  ), { numRuns: 2_000 })
  t.pass('2,000 addresses, each in up to four spellings')
})

t.test('parseIP keeps IPv4-mapped addresses as IPv6 and refuses malformed IPv6', async (t) => {
  t.equal(parseIP('::ffff:1.2.3.4')?.toString(), '::ffff:102:304')
  t.equal(parseIP('::1.2.3.4')?.toString(), '::102:304')
  t.equal(parseIP('::')?.toString(), '::')
  t.equal(parseIP('1:2:3:4:5:6:7::')?.toString(), '1:2:3:4:5:6:7:0')
  t.equal(parseIP('ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255')?.toString(), 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff')
  for (const text of ['1::2:3:4:5:6:7:8', '1:2:3:4:5:6:7:1.2.3.4', '1.2.3.4::', '::1.2.3.4:5', ':1::', '1:::2', '::1%', '%eth0', '1:2', '::010.0.0.1', '::0x1.2.3.4', '::127.1']) {
    t.equal(parseIP(text), null, text)
  }
})

t.test('sourceBucket keeps IPv4 per address', async (t) => {
  t.equal(sourceBucket('1.2.3.4'), '1.2.3.4')
  t.equal(sourceBucket('::ffff:1.2.3.4'), '1.2.3.4')
  t.not(sourceBucket('1.2.3.4'), sourceBucket('1.2.3.5'))
  // The prefix length concerns IPv6 only.
  t.equal(sourceBucket('1.2.3.4', 16), '1.2.3.4')
})

t.test('sourceBucket shares one bucket across a /64', async (t) => {
  const buckets = new Set<string | null>()
  const addresses = new Set<string>()
  for (let i = 0; i < 200; i++) {
    const interfaceId = [0, 0, 0, 0].map(() => Math.floor(Math.random() * 0x10000).toString(16)).join(':')
    const address = `2001:db8:1:2:${interfaceId}`
    addresses.add(address)
    buckets.add(sourceBucket(address))
  }
  t.ok(addresses.size > 190, 'the addresses differ')
  t.strictSame([...buckets], ['2001:db8:1:2::/64'])
  t.equal(sourceBucket('2001:db8:1:2::'), '2001:db8:1:2::/64')
  t.equal(sourceBucket('2001:db8:1:2:ffff:ffff:ffff:ffff'), '2001:db8:1:2::/64')
  t.equal(sourceBucket('fe80::1%eth0'), 'fe80::/64')
})

t.test('sourceBucket separates different /64s', async (t) => {
  t.equal(sourceBucket('2001:db8:1:3::1'), '2001:db8:1:3::/64')
  t.not(sourceBucket('2001:db8:1:2::1'), sourceBucket('2001:db8:1:3::1'))
  t.not(sourceBucket('2001:db8:1:2::1'), sourceBucket('2001:db9:1:2::1'))
  t.not(sourceBucket('2001:db8:1:2::1'), sourceBucket('2001:db8:1:2::1', 56))
})

t.test('sourceBucket honours a custom prefix length', async (t) => {
  t.equal(sourceBucket('2001:db8:abcd:12ff::1', 48), '2001:db8:abcd::/48')
  t.equal(sourceBucket('2001:db8:abcd:12ff::1', 56), '2001:db8:abcd:1200::/56')
  t.equal(sourceBucket('2001:db8:abcd:12ff::1', 60), '2001:db8:abcd:12f0::/60')
  t.equal(sourceBucket('2001:db8:abcd:12ff::1', 63), '2001:db8:abcd:12fe::/63')
  t.equal(sourceBucket('2001:db8:abcd:12ff::1', 128), '2001:db8:abcd:12ff::1/128')
  t.equal(sourceBucket('2001:db8:abcd:12ff::1', 0), '::/0')
  t.equal(sourceBucket('2001:db8:abcd:12ff::1', 1), '::/1')
  t.equal(sourceBucket('ffff::1', 1), '8000::/1')
  t.equal(sourceBucket('2001:db8:abcd:12ff::1', 17), '2001::/17')
  t.equal(sourceBucket('2001:8db8::1', 17), '2001:8000::/17')
  t.equal(sourceBucket('2001:db8:1:2::1', 48), sourceBucket('2001:db8:1:3::1', 48))
})

t.test('sourceBucket refuses garbage and bad prefix lengths', async (t) => {
  t.equal(sourceBucket('nope'), null)
  t.equal(sourceBucket(''), null)
  t.equal(sourceBucket('2001:db8::/64'), null)
  for (const length of [-1, 129, 64.5, Number.NaN]) {
    t.throws(() => sourceBucket('2001:db8::1', length), RangeError, String(length))
  }
})
