import { CodeSigner, generateCode, generateRequestId, type CodeScope } from './signer.js'
import { tenantScope } from '../tenants/api-keys.js'
import type { TokenStore } from '../tokens/token-store.js'

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

export const GUESS_FORMAT = /^[0-9]{6}$/

/**
 * Tokens of different tenants and modes live under different keys and can never meet. The
 * tenant and mode are the Redis Cluster hash tag: a token shares its slot with the counters
 * its dispatch and verify touch, so each runs as one script (see lib/admission).
 */
export function storeKey (scope: TokenScope, requestId: string): string {
  return `otp:{${tenantScope(scope.tenantId, scope.mode)}}:${requestId}`
}

export interface MintedCode extends IssuedCode {
  /** What the store keeps: the code's keyed hash, the recipient's tag and its address hash. */
  record: string
}

/**
 * A new code, its requestId and its store record, not yet stored. The record carries the
 * recipient's tag so that wrong guesses can be counted per recipient, and the tenant's keyed
 * hash of the address (lib/receipts/address-hash.ts) for the receipt and the events of its
 * verify, which knows only the requestId. Both are keyed hashes, never the address.
 */
export function mintCode (signer: CodeSigner, scope: TokenScope, recipientTag: string, addressHash: string): MintedCode {
  const requestId = generateRequestId()
  const code = generateCode()
  const codeScope: CodeScope = { tenantId: scope.tenantId, mode: scope.mode, requestId }
  return { requestId, code, storeKey: storeKey(scope, requestId), record: `${signer.sign(codeScope, code)}|${recipientTag}|${addressHash}` }
}

/** 128 random bits make a collision practically impossible; this many fresh tries turn one into a retry. */
export const MINT_ATTEMPTS = 3

/** Creates a code and stores its keyed hash, bound to tenant, mode and requestId. */
export async function issueCode (
  store: TokenStore, signer: CodeSigner, scope: TokenScope, recipientTag: string, addressHash: string, ttlMs: number
): Promise<IssuedCode> {
  // NX turns a collision into a retry instead of a silent overwrite of somebody else's code.
  for (let attempt = 0; attempt < MINT_ATTEMPTS; attempt++) {
    const minted = mintCode(signer, scope, recipientTag, addressHash)
    if (await store.put(minted.storeKey, minted.record, ttlMs)) {
      return { requestId: minted.requestId, code: minted.code, storeKey: minted.storeKey }
    }
  }
  throw new Error('could not allocate a unique requestId')
}
