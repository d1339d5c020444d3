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
