import { hash } from 'node:crypto'

/** The headers a sidecar passes the caller's verified identity in (MESH_IDENTITY_HEADER). */
export type MeshIdentityHeader = 'x-forwarded-client-cert' | 'l5d-client-id'

/**
 * The gateways among the mesh's callers (MESH_GATEWAY_IDENTITIES): their requests speak for
 * the end users they forward, named in X-Forwarded-For, not for the gateway itself.
 */
export interface MeshGateways {
  /** Exact identities, or prefixes ending in `/*` (as workloadMatcher reads them). */
  identities: string[]
  /** Proxies in front of the gateways that append to X-Forwarded-For (MESH_GATEWAY_TRUSTED_HOPS). */
  trustedHops: number
}

/** One XFCC element: its key-value pairs in order, keys lower-cased (they are case-insensitive). */
export type XfccElement = Array<[key: string, value: string]>

/** SPIFFE IDs are at most 2048 bytes; Linkerd identities are DNS names, far shorter. */
export const MAX_IDENTITY_LENGTH = 2048

/** Printable ASCII without spaces: what a SPIFFE ID, a URI SAN or a Linkerd identity is made of. */
const IDENTITY = /^[\x21-\x7e]+$/
const KEY_CHAR = /[A-Za-z0-9_-]/

export class XfccSyntaxError extends Error {
  constructor (problem: string, at: number) {
    super(`x-forwarded-client-cert: ${problem} at character ${at}`)
    this.name = 'XfccSyntaxError'
  }
}

/**
 * Envoy's x-forwarded-client-cert grammar: elements separated by `,`, one per proxy that
 * appended one; each a `;`-separated list of `key=value` pairs, keys case-insensitive
 * (`By`, `Hash`, `Cert`, `Chain`, `Subject`, `URI`, `DNS`). A value holding `,`, `;` or `=` is
 * double-quoted, and a `"` inside quotes is escaped as `\"` (a backslash escapes whatever
 * follows it). Spaces and tabs around separators are tolerated (node joins repeated headers
 * with ", "). Anything else (an empty element or pair, a pair without `=`, an unterminated
 * quote, a quote inside an unquoted value, a control or non-ASCII character) is a syntax error:
 * an identity is taken from a header read whole, or not at all.
 */
export function parseXfcc (header: string): XfccElement[] {
  const elements: XfccElement[] = []
  let element: XfccElement = []
  let i = 0
  const skipSpaces = (): void => { while (header[i] === ' ' || header[i] === '\t') i++ }
  for (;;) {
    skipSpaces()
    const keyStart = i
    while (i < header.length && KEY_CHAR.test(header[i] ?? '')) i++
    if (i === keyStart) throw new XfccSyntaxError(header[i] === undefined ? 'a key is missing' : `unexpected ${JSON.stringify(header[i])} where a key starts`, i)
    const key = header.slice(keyStart, i).toLowerCase()
    if (header[i] !== '=') throw new XfccSyntaxError(`"=" expected after the key "${key}"`, i)
    i++
    let value = ''
    if (header[i] === '"') {
      i++
      for (;;) {
        const char = header[i]
        if (char === undefined) throw new XfccSyntaxError('unterminated quoted value', i)
        if (char === '"') break
        if (char === '\\') {
          i++
          const escaped = header[i]
          if (escaped === undefined) throw new XfccSyntaxError('a backslash ends the header', i)
          checkCharacter(escaped, i)
          value += escaped
        } else {
          checkCharacter(char, i)
          value += char
        }
        i++
      }
      i++
      skipSpaces()
    } else {
      const valueStart = i
      while (i < header.length && header[i] !== ';' && header[i] !== ',') {
        const char = header[i] ?? ''
        if (char === '"') throw new XfccSyntaxError('a quote inside an unquoted value', i)
        checkCharacter(char, i)
        i++
      }
      value = header.slice(valueStart, i).replace(/[ \t]+$/, '')
    }
    element.push([key, value])
    const separator = header[i]
    if (separator === undefined) {
      elements.push(element)
      return elements
    }
    if (separator === ',') {
      elements.push(element)
      element = []
    } else if (separator !== ';') {
      throw new XfccSyntaxError(`unexpected ${JSON.stringify(separator)} after a value`, i)
    }
    i++
  }
}

function checkCharacter (char: string, at: number): void {
  const code = char.charCodeAt(0)
  if (code === 0x09) return
  if (code < 0x20 || code > 0x7e) throw new XfccSyntaxError('a control or non-ASCII character', at)
}

export type IdentityResult = { ok: true, identity: string } | { ok: false, problem: string }

/**
 * The caller's workload identity from the header a trusted sidecar set: XFCC's `URI=` of the
 * last element (the one the nearest proxy, our own sidecar, appended; it must hold exactly one
 * URI), or Linkerd's `l5d-client-id` verbatim. Null when the header is absent: a caller
 * outside the mesh (a gateway, a probe) has no identity.
 */
export function workloadIdentity (header: MeshIdentityHeader, value: string | string[] | undefined): IdentityResult | null {
  if (value === undefined) return null
  // node keeps repeated l5d-client-id headers apart only as an array for a few names; any
  // other repetition arrives joined with ", ", which no identity contains.
  const text = Array.isArray(value) ? value.join(', ') : value
  let identity: string
  if (header === 'l5d-client-id') {
    identity = text
  } else {
    let elements: XfccElement[]
    try {
      elements = parseXfcc(text)
    } catch (error) {
      return { ok: false, problem: (error as Error).message }
    }
    const uris = (elements.at(-1) ?? []).filter(([key]) => key === 'uri').map(([, uri]) => uri)
    if (uris.length !== 1) return { ok: false, problem: `x-forwarded-client-cert: the last element has ${uris.length} URI values, not one` }
    identity = uris[0] ?? ''
  }
  if (identity.length === 0 || identity.length > MAX_IDENTITY_LENGTH || !IDENTITY.test(identity)) {
    return { ok: false, problem: `${header}: the identity must be 1 to ${MAX_IDENTITY_LENGTH} printable ASCII characters without spaces` }
  }
  return { ok: true, identity }
}

/** A SPIFFE ID (spec §2): lower-case trust domain, then one or more path segments of letters, digits, `.`, `-`, `_`. */
const SPIFFE_ID = /^spiffe:\/\/[a-z0-9._-]+(\/[A-Za-z0-9._-]+)+$/
const SPIFFE_SEGMENT = /^[A-Za-z0-9._-]+$/

/** One path segment of a SPIFFE ID: letters, digits, `.`, `-`, `_`, and never `.` or `..` (spec §2.2). */
function validSegment (segment: string): boolean {
  return SPIFFE_SEGMENT.test(segment) && segment !== '.' && segment !== '..'
}
/** A Linkerd identity: `<service account>.<namespace>.serviceaccount.identity.<control plane namespace>.<trust domain>`, DNS labels. */
const LINKERD_IDENTITY = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.serviceaccount\.identity\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/
const LINKERD_MAX_LENGTH = 253

/**
 * Why a MESH_GATEWAY_IDENTITIES entry cannot name a gateway as `header` names workloads, or null.
 * A gateway is trusted to write X-Forwarded-For truthfully, so an entry that is no identity
 * the sidecar could ever send (a typo, `*`, a URL, a `/*` prefix where identities have no
 * path) is refused at start, rather than left to match nothing, or something unintended.
 * x-forwarded-client-cert: a SPIFFE ID (`spiffe://cluster.local/ns/istio-system/sa/gateway`),
 * or one ending in `/*` for every service account of a namespace; no `.` or `..` segment.
 * l5d-client-id: a Linkerd identity, exact.
 */
export function gatewayIdentityProblem (header: MeshIdentityHeader, entry: string): string | null {
  if (header === 'l5d-client-id') {
    return entry.length <= LINKERD_MAX_LENGTH && LINKERD_IDENTITY.test(entry)
      ? null
      : 'is not a Linkerd identity (<service account>.<namespace>.serviceaccount.identity.<control plane namespace>.<trust domain>, in lower case)'
  }
  const id = entry.endsWith('/*') ? entry.slice(0, -2) : entry
  const valid = id.length <= MAX_IDENTITY_LENGTH && SPIFFE_ID.test(id) && id.split('/').slice(3).every(validSegment)
  return valid ? null : 'is not a SPIFFE ID (spiffe://<trust domain>/<path>, the trust domain in lower case), nor one ending in /* for one more path segment'
}

/**
 * A key's `workloads` (and MESH_GATEWAY_IDENTITIES): exact identities, or a prefix ending in
 * `/*` that matches one more path segment (`spiffe://cluster.local/ns/payments/sa/*`: every
 * service account of the namespace). That segment must be one a SPIFFE ID can hold, as
 * gatewayIdentityProblem asks of an entry: `.`, `..`, `%2F`, `?x` or `#x` would otherwise
 * match, spellings no verifying sidecar sends but that another reader of the ID may take
 * for a different workload.
 */
export function workloadMatcher (patterns: readonly string[]): (identity: string) => boolean {
  const exact = new Set<string>()
  const prefixes: string[] = []
  for (const pattern of patterns) {
    if (pattern.endsWith('/*')) prefixes.push(pattern.slice(0, -1))
    else exact.add(pattern)
  }
  return (identity) => exact.has(identity) || prefixes.some((prefix) => identity.startsWith(prefix) && validSegment(identity.slice(prefix.length)))
}

/**
 * The per-source bucket of a workload: a digest, so that an identity of any length and with
 * any character (a Redis Cluster hash tag's braces included) makes a short, inert key part
 * that no address bucket can equal.
 */
export function workloadBucket (identity: string): string {
  return `wl:${hash('sha256', identity, 'base64url')}`
}

/**
 * The one per-source bucket of every caller that reaches the service through the sidecar
 * without an identity: what such a caller writes in X-Forwarded-For is its own word, so it
 * chooses no bucket. Also the name logs give such a caller. No workload bucket (`wl:`) nor
 * address can equal it.
 */
export const UNIDENTIFIED_MESH_SOURCE = 'mesh:unidentified'
