import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from 'node:dns'
import type { LookupFunction } from 'node:net'
import ipaddr from 'ipaddr.js'
import type { IpRangeSet } from '../net/ip-ranges.js'
import { parseIP } from '../net/source-address.js'
import { isLoopbackHost } from './endpoint-url.js'

/**
 * Cloud metadata services that sit on otherwise public or allowable addresses (the rest,
 * 169.254.169.254 and friends, are refused as link-local, unique-local or shared space):
 * refused even inside WEBHOOK_ALLOWED_NETWORKS.
 */
const METADATA_ADDRESSES = new Set(['168.63.129.16', '169.254.169.254', '169.254.170.2', 'fd00:ec2::254', '100.100.100.200', '192.0.0.192'])

/** dns.lookup with `all: true`: how a webhook host is resolved (the system resolver unless a test gives its own). */
export type Resolver = (hostname: string, options: LookupAllOptions, callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void

export interface AddressPolicyOptions {
  /** Loopback destinations allowed (over http too), for development and tests. */
  allowLoopback: boolean
  /** Networks the operator allows although they are not public. */
  allowedNetworks: IpRangeSet | null
  resolve?: Resolver
}

/** A refused destination: the connection fails with this error before any byte is sent. */
export class RefusedDestinationError extends Error {
  readonly code = 'EWEBHOOKDESTINATION'
}

const systemResolver: Resolver = (hostname, options, callback) => { dnsLookup(hostname, options, callback) }

/** 64:ff9b:1::/48 (RFC 8215): NAT64 prefixes for local use, of a length only their network knows. */
const LOCAL_NAT64: [ipaddr.IPv6, number] = [ipaddr.IPv6.parse('64:ff9b:1::'), 48]

/** The IPv4 address in the last 32 bits of an IPv6 address. */
function lastIPv4 (parts: number[]): ipaddr.IPv4 {
  const high = parts[6] ?? 0
  const low = parts[7] ?? 0
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff])
}

/**
 * The IPv4 address an IPv6 address stands for, where its form embeds one that a connection to
 * it reaches (through the kernel, a translator, a tunnel or a relay): IPv4-mapped ::ffff:0:0/96,
 * IPv4-translated ::ffff:0:0:0/96, IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16
 * and ISATAP interface ids (::0:5efe:a.b.c.d and ::200:5efe:a.b.c.d under any prefix).
 */
function embeddedIPv4 (address: ipaddr.IPv6): { ipv4: ipaddr.IPv4, form: string } | null {
  const { parts } = address
  const zeros = (from: number, to: number): boolean => parts.slice(from, to).every((part) => part === 0)
  switch (address.range()) {
    case 'ipv4Mapped': return { ipv4: lastIPv4(parts), form: 'IPv4-mapped' }
    case 'rfc6145': return { ipv4: lastIPv4(parts), form: 'IPv4-translated' }
    case '6to4': {
      const high = parts[1] ?? 0
      const low = parts[2] ?? 0
      return { ipv4: new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]), form: '6to4' }
    }
  }
  if (parts[0] === 0x64 && parts[1] === 0xff9b && zeros(2, 6)) return { ipv4: lastIPv4(parts), form: 'NAT64' }
  if (zeros(0, 6)) return { ipv4: lastIPv4(parts), form: 'IPv4-compatible' }
  if (((parts[4] ?? 1) & ~0x0200) === 0 && parts[5] === 0x5efe) return { ipv4: lastIPv4(parts), form: 'ISATAP' }
  return null
}

/**
 * Where webhook requests may connect (SSRF): public unicast addresses only, unless the
 * operator allows loopback (development) or names networks. An IPv6 address that embeds an
 * IPv4 address (see embeddedIPv4) is judged by that IPv4 address, as strictly as the address
 * itself; Teredo (whose IPv4 server and client are not checkable) and the local-use NAT64
 * prefix are refused outright. The check runs on the resolved addresses inside the
 * connection's own DNS lookup, so the address checked is the address connected to: a name
 * that resolves to a public address for a check and to an internal one for the connection
 * (DNS rebinding) cannot slip through.
 */
export class AddressPolicy {
  readonly #options: AddressPolicyOptions
  readonly #resolve: Resolver

  constructor (options: AddressPolicyOptions) {
    this.#options = options
    this.#resolve = options.resolve ?? systemResolver
  }

  /** Why the URL may not be requested whatever it resolves to, or null. */
  urlRefusal (url: URL): string | null {
    if (url.protocol === 'https:') return null
    if (url.protocol === 'http:' && isLoopbackHost(url.hostname)) {
      return this.#options.allowLoopback ? null : 'http:// is only allowed on loopback with WEBHOOK_ALLOW_HTTP_LOOPBACK=true'
    }
    return 'only https:// URLs are allowed'
  }

  /** Why this address may not be connected to, or null. */
  addressRefusal (address: string): string | null {
    const parsed = parseIP(address)
    if (parsed === null) return `${address} is not an IP address`
    if (parsed instanceof ipaddr.IPv4) return this.#refusal(parsed, this.#options.allowLoopback)
    const normalized = parsed.toString()
    if (METADATA_ADDRESSES.has(normalized)) return `${normalized} is a cloud metadata address`
    if (this.#options.allowedNetworks?.has(normalized) === true) return null
    const range = parsed.range()
    if (range === 'teredo') return `${normalized} is a Teredo address`
    if (parsed.match(LOCAL_NAT64)) return `${normalized} is in the local-use NAT64 prefix 64:ff9b:1::/48`
    if (range !== 'loopback' && range !== 'unspecified') {
      const embedded = embeddedIPv4(parsed)
      if (embedded !== null) {
        // The kernel connects to ::ffff:a.b.c.d as to a.b.c.d; the other forms reach the IPv4 address elsewhere than here.
        const refusal = this.#refusal(embedded.ipv4, this.#options.allowLoopback && embedded.form === 'IPv4-mapped')
        return refusal === null ? null : `${normalized} embeds ${embedded.ipv4.toString()} (${embedded.form}): ${refusal}`
      }
    }
    return this.#refusal(parsed, this.#options.allowLoopback)
  }

  #refusal (address: ipaddr.IPv4 | ipaddr.IPv6, allowLoopback: boolean): string | null {
    const normalized = address.toString()
    if (METADATA_ADDRESSES.has(normalized)) return `${normalized} is a cloud metadata address`
    if (this.#options.allowedNetworks?.has(normalized) === true) return null
    const range = address.range()
    if (range === 'unicast') return null
    if (range === 'loopback' && allowLoopback) return null
    return `${normalized} is a ${range} address`
  }

  /**
   * A `lookup` for http.request: resolves, refuses the host if any of its addresses is
   * refused, and hands the connection only checked addresses.
   */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    this.#resolve(hostname, { all: true, family: options.family ?? 0, ...(options.hints === undefined ? {} : { hints: options.hints }) }, (error, addresses) => {
      if (error !== null) {
        callback(error, '', 0)
        return
      }
      const refusal = addresses.length === 0 ? `${hostname} has no address` : addresses.map((entry) => this.addressRefusal(entry.address)).find((reason) => reason !== null)
      if (refusal !== undefined && refusal !== null) {
        callback(new RefusedDestinationError(`${hostname}: ${refusal}`), '', 0)
        return
      }
      if (options.all === true) {
        (callback as unknown as (error: null, addresses: LookupAddress[]) => void)(null, addresses)
        return
      }
      const [first] = addresses
      callback(null, first?.address ?? '', first?.family ?? 4)
    })
  }
}
