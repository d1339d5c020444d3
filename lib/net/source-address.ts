import { isIPv4 } from 'node:net'
import ipaddr from 'ipaddr.js'

/**
 * An address reduced to numbers. IPv4-mapped IPv6 is already unwrapped: a client reaching a
 * dual-stack socket over IPv4 is the same source as when it reaches an IPv4-only one.
 */
export type ParsedAddress =
  | { kind: 'ipv4', value: number }
  /** Eight 16-bit groups, as ipaddr.js holds them. */
  | { kind: 'ipv6', parts: number[] }

/**
 * Reads an IPv4 or IPv6 address as a socket, proxy-addr or a block list writes it; null for
 * anything else. IPv4-mapped IPv6 stays IPv6 here, as a mapped CIDR shorter than /96 reaches
 * beyond IPv4.
 *
 * ipaddr.js on its own also takes the inet_aton shorthands ("127.1", "0x7f.0.0.1") and reads
 * "010.0.0.1" as octal, 8.0.0.1, both as IPv4 and in the dotted tail of IPv6. Other tools read
 * such strings differently, so an address written that way has no single meaning and is refused.
 */
export function parseIP (raw: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  if (!raw.includes(':')) return ipaddr.IPv4.isValidFourPartDecimal(raw) ? ipaddr.IPv4.parse(raw) : null
  let text = raw
  const zone = raw.indexOf('%')
  if (zone !== -1) {
    if (zone === raw.length - 1) return null
    // The zone id ("%eth0") only names the local interface a link-local address was seen on,
    // not a different sender. ipaddr.js takes only letters and digits there ("%br-1a2b" is a
    // real Linux bridge name), so it is dropped rather than handed over.
    text = raw.slice(0, zone)
  }
  if (text.includes('.')) {
    // Besides the lax octets, ipaddr.js reads the deprecated IPv4-compatible "::a.b.c.d" as
    // IPv4-mapped, which would turn an IPv6 source into an IPv4 one. Checked here and handed
    // over as two hex groups, the tail leaves ipaddr.js nothing to read its own way.
    const tailStart = text.lastIndexOf(':') + 1
    const tail = text.slice(tailStart)
    if (!ipaddr.IPv4.isValidFourPartDecimal(tail)) return null
    const value = ipv4Value(ipaddr.IPv4.parse(tail))
    text = `${text.slice(0, tailStart)}${Math.floor(value / 65536).toString(16)}:${(value % 65536).toString(16)}`
  }
  try {
    return ipaddr.IPv6.parse(text)
  } catch {
    return null
  }
}

/** The address as an unsigned 32-bit number; multiplying rather than shifting keeps it unsigned past 2^31. */
export function ipv4Value (address: ipaddr.IPv4): number {
  return address.toByteArray().reduce((value, octet) => value * 256 + octet, 0)
}

function parseUnwrapped (raw: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  const address = parseIP(raw)
  return address instanceof ipaddr.IPv6 && address.isIPv4MappedAddress() ? address.toIPv4Address() : address
}

const MAPPED_PREFIX = '::ffff:'

/**
 * The dotted quad of an IPv4-mapped address as a dual-stack socket reports an IPv4 peer
 * ("::ffff:192.0.2.7"), without a parse; null for any other spelling (left to ipaddr.js).
 */
function mappedIPv4 (raw: string): string | null {
  if (!raw.startsWith(MAPPED_PREFIX)) return null
  const tail = raw.slice(MAPPED_PREFIX.length)
  return isIPv4(tail) ? tail : null
}

/** The value of a dotted quad that node's isIPv4 accepted (canonical: no shorthand, no padding). */
function canonicalIPv4Value (raw: string): number {
  let value = 0
  let octet = 0
  for (let index = 0; index < raw.length; index++) {
    const char = raw.charCodeAt(index)
    if (char === 46) {
      value = value * 256 + octet
      octet = 0
    } else {
      octet = octet * 10 + char - 48
    }
  }
  return value * 256 + octet
}

/** Parses an IPv4 or IPv6 address as a socket or proxy-addr reports it; null for anything else. */
export function parseAddress (raw: string): ParsedAddress | null {
  // The common case (an IPv4 peer, a forwarded IPv4 client) without ipaddr.js's regular
  // expressions: a block list or trust check runs on every request.
  if (isIPv4(raw)) return { kind: 'ipv4', value: canonicalIPv4Value(raw) }
  const mapped = mappedIPv4(raw)
  if (mapped !== null) return { kind: 'ipv4', value: canonicalIPv4Value(mapped) }
  const address = parseUnwrapped(raw)
  if (address === null) return null
  return address instanceof ipaddr.IPv4 ? { kind: 'ipv4', value: ipv4Value(address) } : { kind: 'ipv6', parts: address.parts }
}

/**
 * The canonical text of an address: dotted quad for IPv4 (also when it arrived IPv4-mapped),
 * RFC 5952 for IPv6 (lower case, longest zero run compressed, no zone id). Null for garbage.
 */
export function normalizeAddress (raw: string): string | null {
  if (isIPv4(raw)) return raw
  const mapped = mappedIPv4(raw)
  if (mapped !== null) return mapped
  const address = parseUnwrapped(raw)
  if (address === null) return null
  return address instanceof ipaddr.IPv4 ? address.toString() : address.toRFC5952String()
}

/**
 * The key a rate limiter should count under. One IPv6 subscriber is normally handed a whole
 * /64 (or more), so keying on the full address would let a single host rotate through 2^64
 * buckets; its network prefix is what identifies it. IPv4 stays per address.
 */
export function sourceBucket (raw: string, ipv6PrefixLength = 64): string | null {
  if (!Number.isInteger(ipv6PrefixLength) || ipv6PrefixLength < 0 || ipv6PrefixLength > 128) {
    throw new RangeError(`ipv6PrefixLength must be an integer from 0 to 128, got ${ipv6PrefixLength}`)
  }
  // What a socket reports for an IPv4 peer: already canonical (node's check refuses the
  // shorthand and octal forms), so it is its own bucket without a parse.
  if (isIPv4(raw)) return raw
  const mapped = mappedIPv4(raw)
  if (mapped !== null) return mapped
  const address = parseUnwrapped(raw)
  if (address === null) return null
  if (address instanceof ipaddr.IPv4) return address.toString()
  const mask = ipaddr.IPv6.subnetMaskFromPrefixLength(ipv6PrefixLength).parts
  const network = new ipaddr.IPv6(address.parts.map((part, index) => part & (mask[index] as number)))
  return `${network.toRFC5952String()}/${ipv6PrefixLength}`
}
