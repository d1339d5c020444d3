/**
 * How deep an SNS body nests objects: the envelope, and `MessageAttributes` (name → `{ Type,
 * Value }`), the only field SNS sends that is not a string.
 */
export const SNS_ENVELOPE_DEPTH = 3

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN = 0x7b
const CLOSE = 0x7d
const COLON = 0x3a
const COMMA = 0x2c
/** What may follow a backslash in a JSON string, besides `u` and its four hex digits. */
const ESCAPED = new Set([QUOTE, BACKSLASH, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74])
const HEX = /^[0-9a-fA-F]{4}$/

/**
 * Whether `text` is JSON of the shape SNS posts: an object whose values are strings or, at most
 * SNS_ENVELOPE_DEPTH deep, objects of the same; no array, number, literal or deeper object. One
 * pass, no recursion, no allocation but the escapes' four digits: an anonymous body of 256 KiB
 * that is not an envelope (`[[[[…`, a long array) is refused at its first character out of
 * shape, before JSON.parse spends time or memory on it. What it accepts JSON.parse reads.
 */
export function isSnsEnvelope (text: string): boolean {
  const length = text.length
  let at = 0
  let depth = 0
  const space = (): void => {
    for (let char = text.charCodeAt(at); char === 0x20 || char === 0x0a || char === 0x0d || char === 0x09; char = text.charCodeAt(++at));
  }
  const string = (): boolean => {
    if (text.charCodeAt(at) !== QUOTE) return false
    at++
    while (at < length) {
      const char = text.charCodeAt(at++)
      if (char === QUOTE) return true
      if (char < 0x20) return false
      if (char === BACKSLASH) {
        const escaped = text.charCodeAt(at++)
        if (escaped === 0x75) {
          if (!HEX.test(text.slice(at, at + 4))) return false
          at += 4
        } else if (!ESCAPED.has(escaped)) {
          return false
        }
      }
    }
    return false
  }
  space()
  if (text.charCodeAt(at) !== OPEN) return false
  at++
  depth++
  // 'open': just after `{` (a member or `}`); 'member': after `,`; 'next': after a value (`,` or `}`).
  let state: 'open' | 'member' | 'next' = 'open'
  for (;;) {
    space()
    const char = text.charCodeAt(at)
    if (char === CLOSE && state !== 'member') {
      at++
      depth--
      if (depth === 0) {
        space()
        return at === length
      }
      state = 'next'
      continue
    }
    if (state === 'next') {
      if (char !== COMMA) return false
      at++
      state = 'member'
      continue
    }
    if (!string()) return false
    space()
    if (text.charCodeAt(at) !== COLON) return false
    at++
    space()
    const value = text.charCodeAt(at)
    if (value === OPEN && depth < SNS_ENVELOPE_DEPTH) {
      at++
      depth++
      state = 'open'
    } else if (string()) {
      state = 'next'
    } else {
      return false
    }
  }
}
