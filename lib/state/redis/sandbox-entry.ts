import type { SandboxMessage } from '../sandbox-inbox.js'

/*
 * How a sandbox message is kept in Redis (sandboxEntriesKey): a JSON header, a newline, then
 * the text and HTML parts as they are, the header giving where the text ends. JSON.stringify of
 * a tenant's largest parts (about 330,000 characters) holds the event loop 1 to 2.5 ms, and
 * JSON.parse as long again; the parts copied as they are cost a few tens of µs.
 */

interface Header extends Omit<SandboxMessage, 'text' | 'html'> {
  /** UTF-16 code units of the text part; the HTML part is the rest. */
  textLength: number
}

export function encodeSandboxEntry (message: SandboxMessage): string {
  const { text, html, ...fields } = message
  const header: Header = { ...fields, textLength: text.length }
  // JSON.stringify never writes a raw newline: the first one ends the header.
  return `${JSON.stringify(header)}\n${text}${html}`
}

/** The message an entry holds, or null for an entry this service did not write. */
export function decodeSandboxEntry (entry: string): SandboxMessage | null {
  const end = entry.indexOf('\n')
  if (end < 0) return null
  let header: unknown
  try {
    header = JSON.parse(entry.slice(0, end))
  } catch {
    return null
  }
  if (header === null || typeof header !== 'object') return null
  const { textLength, ...fields } = header as Header
  const body = end + 1
  if (!Number.isSafeInteger(textLength) || textLength < 0 || body + textLength > entry.length) return null
  return { ...fields, text: entry.slice(body, body + textLength), html: entry.slice(body + textLength) }
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
