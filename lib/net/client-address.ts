import { isIPv4 } from 'node:net'
import type { IpRangeSet } from './ip-ranges.js'
import { normalizeAddress } from './source-address.js'

/**
 * More trusted hops than any real proxy chain has. Past it the header is refused: only a
 * client spoofing a chain of our own proxies gets there, and each hop costs a parse.
 */
export const MAX_TRUSTED_HOPS = 16

const PORT = /^[0-9]{1,5}$/

function isPort (text: string): boolean {
  return PORT.test(text) && Number(text) <= 65535
}

/**
 * One X-Forwarded-For entry as proxies write it: an address, an IPv4 address with a port
 * (`192.0.2.7:4711`), or an IPv6 address in brackets with or without a port
 * (`[2001:db8::7]:4711`). Returns the canonical address (as normalizeAddress writes it), or
 * null for anything else: `unknown`, RFC 7239 obfuscated names, zero-padded or integer IPv4,
 * an empty entry, garbage.
 */
export function parseForwardedEntry (raw: string): string | null {
  const entry = raw.trim()
  if (entry.startsWith('[')) {
    const close = entry.indexOf(']')
    if (close === -1) return null
    const rest = entry.slice(close + 1)
    if (rest !== '' && !(rest.startsWith(':') && isPort(rest.slice(1)))) return null
    const inside = entry.slice(1, close)
    // Brackets only ever hold IPv6; "[1.2.3.4]" is no form a proxy writes.
    return inside.includes(':') ? normalizeAddress(inside) : null
  }
  const colon = entry.indexOf(':')
  if (colon !== -1 && colon === entry.lastIndexOf(':')) {
    // One colon: IPv4 with a port (IPv6 has at least two colons).
    return isPort(entry.slice(colon + 1)) && isIPv4(entry.slice(0, colon)) ? entry.slice(0, colon) : null
  }
  return normalizeAddress(entry)
}

/**
 * The address of the client a request speaks for: the one address that block lists,
 * per-source buckets and logs use.
 *
 * It is the socket's peer, unless that peer is a trusted proxy: then X-Forwarded-For is read
 * from the right, each trusted proxy handing over to the entry before it, and the first entry
 * that is not a trusted proxy is the client (a client can prepend what it likes, but not get
 * past the entry our own proxy appended). When every entry is a trusted proxy, the furthest
 * one is the client. Null when the entry that would name the client names no address (or the
 * chain of trusted hops is implausibly long): such a request has no client address and is
 * refused, rather than given a bucket of its own (one client could mint them at will) or
 * passed as an unlisted source.
 */
export function clientAddress (socketAddress: string | undefined, forwardedFor: string | undefined, trustedProxies: IpRangeSet | null): string | null {
  let client = peerAddress(socketAddress)
  if (client === null || trustedProxies === null || !trustedProxies.has(client)) return client
  if (forwardedFor === undefined || forwardedFor.trim() === '') return client
  let end = forwardedFor.length
  for (let hops = 0; hops < MAX_TRUSTED_HOPS; hops++) {
    const start = end === 0 ? 0 : forwardedFor.lastIndexOf(',', end - 1) + 1
    client = parseForwardedEntry(forwardedFor.slice(start, end))
    if (client === null || !trustedProxies.has(client)) return client
    if (start === 0) return client
    end = start - 1
  }
  return null
}

/**
 * The end client a mesh gateway forwarded a request for (MESH_GATEWAY_IDENTITIES): the
 * X-Forwarded-For entry `trustedHops` places left of the right-most one. The gateway appends
 * the address of the peer it accepted the connection from, and each of the `trustedHops`
 * proxies in front of it (load balancers) appended the address it saw in turn, so the entry
 * after theirs is the client's; whatever a client wrote itself is further left and never read.
 * TRUST_PROXY plays no part: the sidecars in between add nothing, and the gateway is known by
 * its identity, not by an address.
 *
 * Null when the header has fewer entries than that, or when the gateway's or a proxy's entry
 * names no address: the chain is not the one the operator described, and the request has no
 * client to count, rather than being counted as the gateway (every end user in one bucket) or
 * as an entry further left (the client's own choice).
 */
export function gatewayClient (forwardedFor: string | undefined, trustedHops: number): string | null {
  if (forwardedFor === undefined) return null
  let end = forwardedFor.length
  for (let hops = 0; ; hops++) {
    const start = end === 0 ? 0 : forwardedFor.lastIndexOf(',', end - 1) + 1
    const entry = parseForwardedEntry(forwardedFor.slice(start, end))
    if (entry === null || hops === trustedHops) return entry
    if (start === 0) return null
    end = start - 1
  }
}

/** The socket peer's canonical address; a socket reports IPv4 peers canonically already, so the common case costs no parse. */
export function peerAddress (socketAddress: string | undefined): string | null {
  if (socketAddress === undefined) return null
  return isIPv4(socketAddress) ? socketAddress : normalizeAddress(socketAddress)
}

/** Whether the socket peer is a proxy in TRUST_PROXY: only such a peer's headers speak for the caller. */
export function fromTrustedProxy (socketAddress: string | undefined, trustedProxies: IpRangeSet | null): boolean {
  if (trustedProxies === null) return false
  const peer = peerAddress(socketAddress)
  return peer !== null && trustedProxies.has(peer)
}
