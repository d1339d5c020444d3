import type { SandboxMessage } from '../sandbox-inbox.js'

/*
 * How a sandbox message is kept in Redis (sandboxEntriesKey): a JSON header, a newline, then
 * the text and HTML parts as they are, the header giving where the text ends. JSON.stringify of
 * a tenant's largest parts (about 330,000 characters) holds the event loop 1 to 2.5 ms, and
 * JSON.parse as long again; the parts copied as they are cost a few tens of µs.
 *
 * A part a tenant's template rendered is not in the entry at all: the header names the pieces
 * around the code (sandboxPiecesKey, kept once for all the messages of a minute, see
 * CodePieces.stored) and the part is those pieces with the entry's code spliced in. Sending a
 * tenant's largest parts to Redis with every sandbox message made a flood of them cost every
 * other tenant on the connection (bench/noisy-neighbour.md).
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
  /** Ids of the pieces (CodePieces.stored) the text and the HTML are the code spliced into; null for a part the entry holds. */
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

const optionalId = (id: unknown): id is string | undefined => id === undefined || (typeof id === 'string' && id !== '')

/** What an entry holds, or null for an entry this service did not write. */
export function decodeSandboxEntry (entry: string): SandboxEntry | null {
  const end = entry.indexOf('\n')
  if (end < 0) return null
  let header: unknown
  try {
    header = JSON.parse(entry.slice(0, end))
  } catch {
    return null
  }
  if (header === null || typeof header !== 'object') return null
  const body = end + 1
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
