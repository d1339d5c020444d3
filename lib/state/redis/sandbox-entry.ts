import { createHash } from 'node:crypto'
import type { SandboxMessage } from '../sandbox-inbox.js'

/*
 * How a sandbox message is kept in Redis (sandboxEntriesKey): a JSON header, a newline, then
 * the text and HTML parts as they are, the header giving where the text ends. JSON.stringify of
 * a tenant's largest parts (about 330,000 characters) holds the event loop 1 to 2.5 ms, and
 * JSON.parse as long again; the parts copied as they are cost a few tens of µs.
 *
 * A part a tenant's template rendered is not in the entry at all: the header names the pieces
 * around the code (sandboxPiecesKey, kept once for all the messages of a minute, see
 * StoredPieces) and the part is those pieces joined with the entry's code. Sending a tenant's
 * largest parts to Redis with every sandbox message made a flood of them cost every other
 * tenant on the connection (bench/noisy-neighbour.md).
 */

interface Header extends Omit<SandboxMessage, 'text' | 'html'> {
  /** UTF-16 code units of the text part in the entry; the HTML part is the rest. */
  textLength: number
  /** The pieces the text is spliced from, when the entry does not hold it. */
  textPieces?: string
  htmlPieces?: string
}

/** An entry as read: the message, with the parts it names pieces for still to splice. */
export interface SandboxEntry {
  message: SandboxMessage
  /** Ids of the pieces (StoredPieces) the text and the HTML are the code spliced into; null for a part the entry holds. */
  textPieces: string | null
  htmlPieces: string | null
}

/** Ids of stored pieces the entry's parts are made of, where they are not in the entry. */
export interface PieceIds {
  text: string | null
  html: string | null
}

const NO_PIECES: PieceIds = { text: null, html: null }

export function encodeSandboxEntry (message: SandboxMessage, pieces: PieceIds = NO_PIECES): string {
  const { text, html, ...fields } = message
  const header: Header = { ...fields, textLength: pieces.text === null ? text.length : 0 }
  if (pieces.text !== null) header.textPieces = pieces.text
  if (pieces.html !== null) header.htmlPieces = pieces.html
  // JSON.stringify never writes a raw newline: the first one ends the header.
  return `${JSON.stringify(header)}\n${pieces.text === null ? text : ''}${pieces.html === null ? html : ''}`
}

/**
 * The JSON header a value starts with (entries and stored pieces alike) and where the body
 * after its newline starts; null for a value this service did not write.
 */
function jsonHeader (value: string): { header: unknown, body: number } | null {
  const end = value.indexOf('\n')
  if (end < 0) return null
  try {
    return { header: JSON.parse(value.slice(0, end)), body: end + 1 }
  } catch {
    return null
  }
}

const optionalId = (id: unknown): id is string | undefined => id === undefined || (typeof id === 'string' && id !== '')

/** What an entry holds, or null for an entry this service did not write. */
export function decodeSandboxEntry (entry: string): SandboxEntry | null {
  const split = jsonHeader(entry)
  if (split === null) return null
  const { header, body } = split
  if (header === null || typeof header !== 'object') return null
  const { textLength, textPieces, htmlPieces, ...fields } = header as Header
  if (!Number.isSafeInteger(textLength) || textLength < 0 || body + textLength > entry.length) return null
  if (!optionalId(textPieces) || !optionalId(htmlPieces)) return null
  return {
    message: { ...fields, text: entry.slice(body, body + textLength), html: entry.slice(body + textLength) },
    textPieces: textPieces ?? null,
    htmlPieces: htmlPieces ?? null
  }
}

/** A message kept as one JSON object, as instances before this format wrote it (sandboxKey). */
export function decodeJsonSandboxEntry (entry: string): SandboxMessage | null {
  try {
    const message: unknown = JSON.parse(entry)
    return message !== null && typeof message === 'object' ? message as SandboxMessage : null
  } catch {
    return null
  }
}

/**
 * A part's pieces as kept once in Redis: the JSON list of their lengths, a newline, the pieces
 * one after the other. `id` is the SHA-256 of that value, so that every instance rendering the
 * same minute's pieces names them alike and writes them once.
 */
export interface StoredPieces {
  id: string
  value: string
}

/** Computed once per pieces array: the same array serves every dispatch of its minute. */
const storedForm = new WeakMap<readonly string[], StoredPieces>()

export function storedPieces (pieces: readonly string[]): StoredPieces {
  let stored = storedForm.get(pieces)
  if (stored === undefined) {
    const value = `${JSON.stringify(pieces.map((piece) => piece.length))}\n${pieces.join('')}`
    stored = { id: createHash('sha256').update(value).digest('base64url'), value }
    storedForm.set(pieces, stored)
  }
  return stored
}

/** The pieces a stored value holds, or null for a value this service did not write. */
export function decodePieces (value: string): string[] | null {
  const split = jsonHeader(value)
  if (split === null) return null
  const { header: lengths, body } = split
  if (!Array.isArray(lengths) || lengths.length === 0) return null
  const pieces: string[] = []
  let at = body
  for (const length of lengths) {
    if (!Number.isSafeInteger(length) || (length as number) < 0) return null
    pieces.push(value.slice(at, at + (length as number)))
    at += length as number
  }
  return at === value.length ? pieces : null
}
