import { isIP } from 'node:net'
import { parseIP } from '../net/source-address.js'

/** `localhost`, a 127/8 address or ::1: the only hosts an http:// endpoint may name. */
export function isLoopbackHost (hostname: string): boolean {
  if (hostname === 'localhost' || hostname.endsWith('.localhost')) return true
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname
  if (isIP(bare) === 0) return false
  const address = parseIP(bare)
  return address !== null && address.range() === 'loopback'
}

export type EndpointUrlCheck = { ok: true, url: URL } | { ok: false, problem: string }

/**
 * What a webhook URL must be, whatever it resolves to: https (or http on a loopback host, which
 * the operator must still allow), no credentials, no fragment. Where it may connect is decided
 * per attempt, after DNS (lib/webhooks/address-policy.ts).
 */
export function checkEndpointUrl (text: string): EndpointUrlCheck {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return { ok: false, problem: 'is not a URL' }
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return { ok: false, problem: 'must be https://' }
  if (url.protocol === 'http:' && !isLoopbackHost(url.hostname)) return { ok: false, problem: 'must be https:// (http:// only on a loopback host, for development)' }
  if (url.username !== '' || url.password !== '') return { ok: false, problem: 'must not carry credentials' }
  if (url.hash !== '') return { ok: false, problem: 'must not have a fragment' }
  return { ok: true, url }
}
