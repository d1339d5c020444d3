import { randomInt } from 'node:crypto'
import { ID_BYTES, randomId } from '../random-ids.js'
import { tokenRecord } from '../state/tokens.js'
import type { KeyMode } from '../keys/api-keys.js'
import type { CodeSigner } from './signer.js'

/** Six ASCII digits from a CSPRNG, leading zeros kept. */
export function generateCode (): string {
  return randomInt(0, 1_000_000).toString().padStart(6, '0')
}

/** 128 bits: as many as the MAC, more than a UUID's 122. */
export const REQUEST_ID_BYTES = ID_BYTES

/** 128 bits from a CSPRNG, URL-safe, 26 characters. */
export function generateRequestId (): string {
  return 'otp_' + randomId()
}

/** What verify accepts, once trimmed: exactly six ASCII digits. */
export const GUESS_FORMAT = /^[0-9]{6}$/

/** A new code, not yet stored: its requestId and the record to store. */
export interface MintedCode {
  requestId: string
  code: string
  /** What the store keeps: the code's keyed hash, the recipient's tag and the address hash. */
  record: string
}

/**
 * Mints a code bound to its tenant, mode and requestId. The record carries the mailbox as its
 * lane counts it (`laneSubject`) so that wrong guesses can be counted per mailbox and lane,
 * and the tenant's address hash for the receipt of a right guess.
 */
export function mintCode (signer: CodeSigner, tenantId: string, mode: KeyMode, laneSubject: string, addressHash: string): MintedCode {
  const requestId = generateRequestId()
  const code = generateCode()
  return {
    requestId,
    code,
    record: tokenRecord(signer.sign({ tenantId, mode, requestId }, code), laneSubject, addressHash)
  }
}

/** 128 random bits make a collision practically impossible; this many fresh tries turn one into a retry. */
export const MINT_ATTEMPTS = 3
