import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
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

export interface AddressPolicyOptions {
  /** Loopback destinations allowed (over http too), for development and tests. */
  allowLoopback: boolean
  /** Networks the operator allows although they are not public. */
  allowedNetworks: IpRangeSet | null
}

/** A refused destination: the connection fails with this error before any byte is sent. */
export class RefusedDestinationError extends Error {
  readonly code = 'EWEBHOOKDESTINATION'
}

/**
 * Where webhook requests may connect (SSRF): public unicast addresses only, unless the
 * operator allows loopback (development) or names networks. The check runs on the resolved
 * addresses inside the connection's own DNS lookup, so the address checked is the address
 * connected to: a name that resolves to a public address for a check and to an internal
 * one for the connection (DNS rebinding) cannot slip through.
 */
export class AddressPolicy {
  readonly #options: AddressPolicyOptions

  constructor (options: AddressPolicyOptions) {
    this.#options = options
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
    let parsed: ipaddr.IPv4 | ipaddr.IPv6 | null = parseIP(address)
    if (parsed === null) return `${address} is not an IP address`
    if (parsed instanceof ipaddr.IPv6 && parsed.isIPv4MappedAddress()) parsed = parsed.toIPv4Address()
    const normalized = parsed.toString()
    if (METADATA_ADDRESSES.has(normalized)) return `${normalized} is a cloud metadata address`
    if (this.#options.allowedNetworks?.has(normalized) === true) return null
    const range = parsed.range()
    if (range === 'unicast') return null
    if (range === 'loopback' && this.#options.allowLoopback) return null
    return `${normalized} is a ${range} address`
  }

  /**
   * A `lookup` for http.request: resolves, refuses the host if any of its addresses is
   * refused, and hands the connection only checked addresses.
   */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    dnsLookup(hostname, { all: true, family: options.family ?? 0, ...(options.hints === undefined ? {} : { hints: options.hints }) }, (error, addresses: LookupAddress[]) => {
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
