import { CodeSigner, generateCode, generateRequestId, type CodeScope } from './code-signer.js'
import type { TokenStore } from './stores/token-store.js'

export interface TokenScope {
  tenantId: string
  mode: 'live' | 'test'
}

export interface IssuedCode {
  requestId: string
  code: string
  /** The store key, to delete the token when its mail could not leave. */
  storeKey: string
}

export type VerifyOutcome =
  | { result: 'verified', recipientTag: string }
  | { result: 'mismatch', recipientTag: string | null }
  | { result: 'malformed', recipientTag: string | null }

const GUESS_FORMAT = /^[0-9]{6}$/

/** Tokens of different tenants and modes live under different keys and can never meet. */
export function storeKey (scope: TokenScope, requestId: string): string {
  return `otp:${scope.tenantId}:${scope.mode}:${requestId}`
}

/**
 * Creates a code and stores its keyed hash, bound to tenant, mode and requestId. The record
 * also carries the recipient's tag so that wrong guesses can be counted per recipient.
 */
export async function issueCode (
  store: TokenStore, signer: CodeSigner, scope: TokenScope, recipientTag: string, ttlMs: number
): Promise<IssuedCode> {
  // 144 random bits make a collision practically impossible; NX turns one into a retry
  // instead of a silent overwrite of somebody else's code.
  for (let attempt = 0; attempt < 3; attempt++) {
    const requestId = generateRequestId()
    const code = generateCode()
    const codeScope: CodeScope = { ...scope, requestId }
    const key = storeKey(scope, requestId)
    if (await store.put(key, `${signer.sign(codeScope, code)}|${recipientTag}`, ttlMs)) {
      return { requestId, code, storeKey: key }
    }
  }
  throw new Error('could not allocate a unique requestId')
}

/**
 * Consumes the token whatever the guess (every verify execution is single use), then
 * compares in constant time. Unknown, expired, used and foreign requestIds all come out as
 * 'mismatch', after the same amount of hashing.
 */
export async function verifyCode (
  store: TokenStore, signer: CodeSigner, scope: TokenScope, requestId: string, rawGuess: string
): Promise<VerifyOutcome> {
  const record = await store.take(storeKey(scope, requestId))
  const guess = rawGuess.trim()
  const codeScope: CodeScope = { ...scope, requestId }
  if (record === null) {
    signer.burn(codeScope, guess)
    return GUESS_FORMAT.test(guess) ? { result: 'mismatch', recipientTag: null } : { result: 'malformed', recipientTag: null }
  }
  const separator = record.lastIndexOf('|')
  const recipientTag = record.slice(separator + 1)
  if (!GUESS_FORMAT.test(guess)) return { result: 'malformed', recipientTag }
  return signer.verify(record.slice(0, separator), codeScope, guess)
    ? { result: 'verified', recipientTag }
    : { result: 'mismatch', recipientTag }
}
