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
    const name = (rawHeaders[index] as string).toLowerCase()
    const which = lowerCaseNames.indexOf(name)
    if (which === -1) continue
    const bit = 1 << which
    if ((seen & bit) !== 0) return name
    seen |= bit
  }
  return null
}
