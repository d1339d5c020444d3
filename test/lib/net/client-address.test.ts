import t from 'tap'
import fc from 'fast-check'
import { clientAddress, gatewayClient, MAX_TRUSTED_HOPS, parseForwardedEntry } from '../../../lib/net/client-address.js'
import { IpRangeSet } from '../../../lib/net/ip-ranges.js'
import { normalizeAddress } from '../../../lib/net/source-address.js'
import { headerCount, repeatedHeader } from '../../../lib/net/http-headers.js'

const proxies = IpRangeSet.fromEntries(['127.0.0.1', '10.0.0.0/8', 'fd00::/8']).set

t.test('forwarded entries that name an address, with or without a port', async (t) => {
  const named: Record<string, string> = {
    '203.0.113.7': '203.0.113.7',
    ' 203.0.113.7\t': '203.0.113.7',
    '203.0.113.7:4711': '203.0.113.7',
    '203.0.113.7:0': '203.0.113.7',
    '203.0.113.7:65535': '203.0.113.7',
    '2001:db8::7': '2001:db8::7',
    '2001:DB8:0:0:0:0:0:7': '2001:db8::7',
    '[2001:db8::7]': '2001:db8::7',
    '[2001:db8::7]:4711': '2001:db8::7',
    '[::ffff:203.0.113.7]:4711': '203.0.113.7',
    '::ffff:203.0.113.7': '203.0.113.7',
    'fe80::1%eth0': 'fe80::1'
  }
  for (const [entry, address] of Object.entries(named)) t.equal(parseForwardedEntry(entry), address, JSON.stringify(entry))
})

t.test('anything else names no address', async (t) => {
  const garbage = [
    '', ' ', 'unknown', 'UNKNOWN', '_hidden', '_gazonk', 'garbage', 'localhost', 'example.com',
    // Zero-padded and shorthand IPv4 mean different addresses to different readers.
    '127.000.000.006', '010.0.0.1', '127.1', '0x7f.0.0.1', '2130706438', '0',
    '203.0.113.7:', '203.0.113.7:65536', '203.0.113.7:-1', '203.0.113.7:80:80', '203.0.113.7:http', '203.0.113.7 :80',
    '[2001:db8::7', '2001:db8::7]', '[2001:db8::7]:', '[2001:db8::7]:99999', '[2001:db8::7]x', '[203.0.113.7]', '[203.0.113.7]:80', '[]', '[]:80',
    '2001:db8::7:4711:1:2:3:4', '1.2.3.4/32', 'for=1.2.3.4', '"1.2.3.4"', '1.2.3.4 5.6.7.8'
  ]
  for (const entry of garbage) t.equal(parseForwardedEntry(entry), null, JSON.stringify(entry))
})

t.test('property: an address with any port parses to the address itself', async (t) => {
  fc.assert(fc.property(fc.oneof(fc.ipV4(), fc.ipV6()), fc.integer({ min: 0, max: 65535 }), (address, port) => {
    const expected = normalizeAddress(address)
    const written = address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`
    return parseForwardedEntry(written) === expected && parseForwardedEntry(address) === expected
  }))
  t.pass()
})

t.test('the socket address decides unless it is a trusted proxy', async (t) => {
  t.equal(clientAddress('198.51.100.1', '203.0.113.7', proxies), '198.51.100.1', 'an untrusted hop: X-Forwarded-For is ignored')
  t.equal(clientAddress('198.51.100.1', 'unknown', proxies), '198.51.100.1', 'even garbage from an untrusted hop changes nothing')
  t.equal(clientAddress('127.0.0.1', '203.0.113.7', null), '127.0.0.1', 'no TRUST_PROXY: nobody is trusted')
  t.equal(clientAddress('::ffff:198.51.100.1', undefined, proxies), '198.51.100.1', 'mapped IPv4 sockets are IPv4')
  t.equal(clientAddress('::ffff:127.0.0.1', '203.0.113.7', proxies), '203.0.113.7', 'a mapped trusted proxy is trusted')
  t.equal(clientAddress(undefined, undefined, proxies), null, 'a socket already gone has no address')
})

t.test('behind trusted proxies: the right-most entry that is not one of them', async (t) => {
  t.equal(clientAddress('127.0.0.1', '203.0.113.7', proxies), '203.0.113.7')
  t.equal(clientAddress('127.0.0.1', '198.51.100.9, 203.0.113.7', proxies), '203.0.113.7', 'what the client wrote before is not read')
  t.equal(clientAddress('127.0.0.1', 'unknown, 203.0.113.7', proxies), '203.0.113.7', 'not even when it is garbage')
  t.equal(clientAddress('127.0.0.1', '203.0.113.7, 10.1.2.3', proxies), '203.0.113.7', 'a chain of trusted proxies is walked')
  t.equal(clientAddress('127.0.0.1', '203.0.113.7, 10.1.2.3:8080, [fd00::1]:443', proxies), '203.0.113.7', 'proxies written with ports are still proxies')
  t.equal(clientAddress('127.0.0.1', '203.0.113.7:4711', proxies), '203.0.113.7', 'a client written with its port')
  t.equal(clientAddress('127.0.0.1', '[2001:db8::7]:4711', proxies), '2001:db8::7')
  t.equal(clientAddress('127.0.0.1', '10.1.2.3', proxies), '10.1.2.3', 'all trusted: the furthest proxy is the client')
  t.equal(clientAddress('127.0.0.1', undefined, proxies), '127.0.0.1', 'no header: the proxy itself')
  t.equal(clientAddress('127.0.0.1', '  ', proxies), '127.0.0.1', 'an empty header says nothing')
})

t.test('behind trusted proxies: an entry in the client position that names no address fails closed', async (t) => {
  for (const header of ['unknown', '127.000.000.006', '2130706438', 'garbage', '203.0.113.7, unknown', '203.0.113.7,', ',', '203.0.113.7,,10.1.2.3', 'unknown, 10.1.2.3']) {
    t.equal(clientAddress('127.0.0.1', header, proxies), null, JSON.stringify(header))
  }
})

t.test('a chain of trusted hops longer than any real one is refused', async (t) => {
  const chain = (hops: number): string => ['203.0.113.7', ...Array.from({ length: hops }, () => '10.0.0.1')].join(', ')
  t.equal(clientAddress('127.0.0.1', chain(MAX_TRUSTED_HOPS - 1), proxies), '203.0.113.7')
  t.equal(clientAddress('127.0.0.1', chain(MAX_TRUSTED_HOPS), proxies), null)
  t.equal(clientAddress('127.0.0.1', chain(5000), proxies), null)
})

t.test('a gateway\'s end client: the entry its trusted hops leave, whatever the client wrote further left', async (t) => {
  t.equal(gatewayClient('203.0.113.7', 0), '203.0.113.7', 'no proxy in front: the peer the gateway appended')
  t.equal(gatewayClient('198.51.100.9, 203.0.113.7', 0), '203.0.113.7', 'what the client wrote itself is not read')
  t.equal(gatewayClient('203.0.113.7:4711', 0), '203.0.113.7', 'written with its port')
  t.equal(gatewayClient('203.0.113.7, 10.0.0.5', 1), '203.0.113.7', 'one load balancer in front')
  t.equal(gatewayClient('unknown, 198.51.100.9, 203.0.113.7, 10.0.0.5, [2001:db8::5]:443', 2), '203.0.113.7', 'two, and garbage the client wrote')
  t.equal(gatewayClient('127.0.0.6, 10.0.0.5', 1), '127.0.0.6', 'TRUST_PROXY plays no part: an entry is not skipped for being a proxy address')
})

t.test('a gateway\'s request without the end client in its place has no client', async (t) => {
  for (const [header, hops] of [
    [undefined, 0], ['', 0], ['  ', 0], ['unknown', 0], ['203.0.113.7, unknown', 0], ['203.0.113.7,', 0],
    ['10.0.0.5', 1], ['203.0.113.7, garbage', 1], ['unknown, 10.0.0.5', 1], [',10.0.0.5', 1], ['203.0.113.7,,10.0.0.5', 1],
    ['203.0.113.7, 10.0.0.5', 2]
  ] as const) {
    t.equal(gatewayClient(header, hops), null, `${JSON.stringify(header)} with ${hops} trusted hops`)
  }
})

t.test('property: a client prepending any entries never moves the gateway\'s end client', async (t) => {
  fc.assert(fc.property(fc.array(fc.string(), { maxLength: 8 }), fc.ipV4(), fc.array(fc.ipV4(), { maxLength: 4 }), (written, client, proxiesInFront) => {
    const chain = [client, ...proxiesInFront].join(', ')
    return gatewayClient([...written, chain].join(','), proxiesInFront.length) === client
  }))
  t.pass()
})

t.test('headerCount counts repeated headers, whatever their case', async (t) => {
  t.equal(headerCount(['Host', 'x', 'Authorization', 'Bearer a'], 'authorization'), 1)
  t.equal(headerCount(['Authorization', 'Bearer a', 'host', 'x', 'AUTHORIZATION', 'Bearer b'], 'authorization'), 2)
  t.equal(headerCount(['Host', 'x', 'X-Authorization', 'Bearer a'], 'authorization'), 0)
  t.equal(headerCount([], 'authorization'), 0)
})

t.test('repeatedHeader names the first of its headers sent on two lines, whatever their case', async (t) => {
  const names = ['end-user-ip', 'x-forwarded-for']
  t.equal(repeatedHeader(['Host', 'x', 'X-Forwarded-For', 'a', 'End-User-IP', 'b'], names), null, 'each once')
  t.equal(repeatedHeader(['X-Forwarded-For', 'a', 'host', 'x', 'x-forwarded-for', 'b'], names), 'x-forwarded-for')
  t.equal(repeatedHeader(['END-USER-IP', 'a', 'end-user-ip', 'a'], names), 'end-user-ip', 'the same value twice too')
  t.equal(repeatedHeader(['X-Forwarded-Fox', 'a', 'X-Forwarded-For', 'b', 'x-forwarded-fo', 'c'], names), null, 'names that only look alike')
  t.equal(repeatedHeader(['Authorization', 'a', 'Authorization', 'b'], names), null, 'other headers are not judged')
  t.equal(repeatedHeader([], names), null)
})
