/**
 * How many times a header appears in a request, from node's `rawHeaders` (name, value, name,
 * value…, as received). `request.headers` cannot tell: node keeps only the first of repeated
 * headers such as Authorization, while a proxy in front may read another one.
 */
export function headerCount (rawHeaders: readonly string[], lowerCaseName: string): number {
  let count = 0
  for (let index = 0; index < rawHeaders.length; index += 2) {
    const name = rawHeaders[index] as string
    if (name.length === lowerCaseName.length && name.toLowerCase() === lowerCaseName) count++
  }
  return count
}

/**
 * The first of `lowerCaseNames` that a request carries on more than one header line, or null.
 * node joins such lines into one value (`a, b`) or keeps the first, and the proxy in front may
 * have read the other one: which of them speaks for the caller is then a guess. One pass over
 * `rawHeaders`, whatever the number of names.
 */
export function repeatedHeader (rawHeaders: readonly string[], lowerCaseNames: readonly string[]): string | null {
  let seen = 0
  for (let index = 0; index < rawHeaders.length; index += 2) {
    const name = rawHeaders[index] as string
    for (let which = 0; which < lowerCaseNames.length; which++) {
      const wanted = lowerCaseNames[which] as string
      if (!sameName(name, wanted)) continue
      const bit = 1 << which
      if ((seen & bit) !== 0) return wanted
      seen |= bit
    }
  }
  return null
}

/** Whether a header name as received is `lowerCaseName`, ASCII case folded, without a new string. */
function sameName (name: string, lowerCaseName: string): boolean {
  if (name.length !== lowerCaseName.length) return false
  for (let index = 0; index < name.length; index++) {
    const code = name.charCodeAt(index)
    if ((code >= 65 && code <= 90 ? code + 32 : code) !== lowerCaseName.charCodeAt(index)) return false
  }
  return true
}
