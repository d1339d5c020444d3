import { hash, randomBytes } from 'node:crypto'
import { KEY_PATTERN } from '../../schemas/patterns.js'

export type KeyKind = 'secret' | 'restricted'
/**
 * A key's mode as keys, the tenants file, receipts and webhooks write it. `test` is the
 * sandbox: the word the docs use, the value the wire has always carried (`sk_test_…`).
 */
export const KEY_MODES = ['live', 'test'] as const
export type KeyMode = typeof KEY_MODES[number]

/** The sandbox's mode: its mail is kept in the sandbox inbox, never sent. */
export const SANDBOX_MODE = 'test' satisfies KeyMode

/** Whether a mode is the sandbox's; the one place the code asks. */
export function isSandbox (mode: KeyMode): boolean {
  return mode === SANDBOX_MODE
}

/** Whether a value read from outside (a message tag, a file) names a mode. */
export function isKeyMode (value: unknown): value is KeyMode {
  return (KEY_MODES as readonly unknown[]).includes(value)
}

const keyPattern = new RegExp(KEY_PATTERN)
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** `sk_live_…`: a prefix that says what the key is, then 256 random bits in base62. */
export function generateKey (kind: KeyKind, mode: KeyMode): string {
  let value = BigInt('0x' + randomBytes(32).toString('hex'))
  let body = ''
  while (body.length < 43) {
    body = BASE62[Number(value % 62n)] + body
    value /= 62n
  }
  return `${kind === 'secret' ? 'sk' : 'rk'}_${mode}_${body}`
}

export function hashKey (key: string): string {
  // The one-shot digest: no Hash object per request.
  return hash('sha256', key, 'hex')
}

export interface ParsedKey {
  kind: KeyKind
  mode: KeyMode
}

/** What the key's prefix claims, or null when it is not shaped like a key at all. */
export function parseKey (key: string): ParsedKey | null {
  if (!keyPattern.test(key)) return null
  return { kind: key.startsWith('sk_') ? 'secret' : 'restricted', mode: key.slice(3, 7) === 'live' ? 'live' : SANDBOX_MODE }
}

/** The key from an `Authorization: Bearer <key>` header, or null. */
export function bearerToken (header: string | undefined): string | null {
  if (header === undefined || header.length > 256) return null
  const match = /^Bearer +(\S+) *$/i.exec(header)
  return match?.[1] ?? null
}
