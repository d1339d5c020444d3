/**
 * Where a JSON text stops parsing, told without its text: JSON.parse's message quotes the
 * characters around the error, which in a file of secrets can be the start of one.
 */

/** Line and column (both from 1) of `offset` in `text`. */
function lineAndColumn (text: string, offset: number): { line: number, column: number } {
  let line = 1
  let lineStart = 0
  for (let at = text.indexOf('\n'); at !== -1 && at < offset; at = text.indexOf('\n', at + 1)) {
    line++
    lineStart = at + 1
  }
  return { line, column: offset - lineStart + 1 }
}

const escapePointer = (segment: string): string => segment.replace(/~/g, '~0').replace(/\//g, '~1')

/**
 * The JSON pointer of the value being read at `offset`: the members and elements opened
 * before it, as far as the text up to there says. The keys are the file's own names (a tier,
 * a language), never a value.
 */
function pointerAt (text: string, offset: number): string {
  const path: Array<{ kind: 'object', key: string | null, expectKey: boolean } | { kind: 'array', index: number }> = []
  let at = 0
  while (at < offset && at < text.length) {
    const char = text[at]
    const top = path.at(-1)
    if (char === '"') {
      let end = at + 1
      while (end < text.length && text[end] !== '"') end += text[end] === '\\' ? 2 : 1
      if (top?.kind === 'object' && top.expectKey) {
        try {
          top.key = JSON.parse(text.slice(at, end + 1)) as string
        } catch {
          top.key = null
        }
        top.expectKey = false
      }
      at = end + 1
      continue
    }
    if (char === '{') path.push({ kind: 'object', key: null, expectKey: true })
    else if (char === '[') path.push({ kind: 'array', index: 0 })
    else if (char === '}' || char === ']') path.pop()
    else if (char === ',' && top?.kind === 'array') top.index++
    else if (char === ',' && top?.kind === 'object') {
      top.key = null
      top.expectKey = true
    }
    at++
  }
  const segments: string[] = []
  for (const level of path) {
    if (level.kind === 'array') segments.push(String(level.index))
    else if (level.key !== null) segments.push(escapePointer(level.key))
    else break
  }
  return segments.length === 0 ? '/' : `/${segments.join('/')}`
}

/**
 * The offset where `text` stops being JSON, found by reading it as JSON does (V8 leaves it out
 * of some messages, those that quote the text instead).
 */
function failureOffset (text: string): number {
  let at = 0
  const space = (): void => { while (at < text.length && ' \t\n\r'.includes(text[at] ?? '')) at++ }
  const fail = (): never => { throw new RangeError(String(at)) }
  const literal = (word: string): void => {
    for (const char of word) {
      if (text[at] !== char) fail()
      at++
    }
  }
  const string = (): void => {
    at++
    for (;;) {
      const char = text[at]
      if (char === undefined || char < ' ') fail()
      if (char === '"') {
        at++
        return
      }
      if (char === '\\') {
        at++
        if (text[at] === 'u') {
          at++
          for (let digit = 0; digit < 4; digit++, at++) if (!/[0-9a-fA-F]/.test(text[at] ?? '')) fail()
          continue
        }
        if (!'"\\/bfnrt'.includes(text[at] ?? 'x')) fail()
      }
      at++
    }
  }
  const number = (): void => {
    const match = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(at, at + 400))
    if (match === null) fail()
    at += match?.[0].length ?? 0
  }
  const value = (): void => {
    space()
    const char = text[at]
    if (char === '{') {
      at++
      space()
      if (text[at] === '}') {
        at++
        return
      }
      for (;;) {
        space()
        if (text[at] !== '"') fail()
        string()
        space()
        if (text[at] !== ':') fail()
        at++
        value()
        space()
        if (text[at] === '}') {
          at++
          return
        }
        if (text[at] !== ',') fail()
        at++
      }
    }
    if (char === '[') {
      at++
      space()
      if (text[at] === ']') {
        at++
        return
      }
      for (;;) {
        value()
        space()
        if (text[at] === ']') {
          at++
          return
        }
        if (text[at] !== ',') fail()
        at++
      }
    }
    if (char === '"') return string()
    if (char === 't') return literal('true')
    if (char === 'f') return literal('false')
    if (char === 'n') return literal('null')
    number()
  }
  try {
    value()
    space()
    return at
  } catch (error) {
    if (error instanceof RangeError) return Number(error.message)
    throw error
  }
}

/** `line L, column C (at /json/pointer)`: where JSON.parse gave up on `text`, nothing of the text itself. */
export function describeJsonError (text: string, error: unknown): string {
  const message = error instanceof Error ? error.message : ''
  const offset = Math.min(failureOffset(text), text.length)
  const { line, column } = lineAndColumn(text, offset)
  // V8's words for what went wrong, when they quote nothing of the text.
  const words = /^(.*) in JSON at position \d+/.exec(message)?.[1]
  const reason = offset >= text.length ? 'the text ends before the JSON does' : words === undefined || words.includes('"') ? 'unexpected character' : words
  return `${reason} at line ${line}, column ${column} (in ${pointerAt(text, offset)})`
}
