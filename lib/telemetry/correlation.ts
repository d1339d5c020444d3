import { randomUUID } from 'node:crypto'
import { PROXY_REQUEST_ID_PATTERN } from '../../schemas/patterns.js'
import { fromTrustedProxy } from '../net/client-address.js'
import type { IpRangeSet } from '../net/ip-ranges.js'

/**
 * What lets a request's log lines be matched with the mesh's access logs and the trace: the
 * sidecar's `x-request-id` and the W3C `traceparent`.
 */

/** A request id we log as it came: 1 to 128 characters, none of which can break a log line. */
const REQUEST_ID = new RegExp(PROXY_REQUEST_ID_PATTERN)

/** version-traceid-parentid-flags; version ff is invalid, and an all-zero id is no id. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?$/

/**
 * The request's id: the `x-request-id` a proxy in TRUST_PROXY sent (a mesh sidecar), when it
 * is a safe one, so that the service's lines carry the id of the sidecar's access log; else a
 * fresh UUID. From any other peer the header is ignored: a caller must not choose the id the
 * operator's logs file its requests under.
 */
export function requestIdFor (header: string | string[] | undefined, peer: string | undefined, proxies: IpRangeSet | null): string {
  return typeof header === 'string' && REQUEST_ID.test(header) && fromTrustedProxy(peer, proxies) ? header : randomUUID()
}

/** The trace id of a valid W3C `traceparent`, or null. */
export function traceIdOf (header: string | string[] | undefined): string | null {
  if (typeof header !== 'string') return null
  const parts = TRACEPARENT.exec(header)
  if (parts === null) return null
  const [, version, traceId, parentId, rest] = parts
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null
  if (/^0+$/.test(traceId ?? '') || /^0+$/.test(parentId ?? '')) return null
  return traceId ?? null
}
