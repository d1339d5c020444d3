/**
 * Allow-list test for a browser Origin. `app.example.com` matches that host on any scheme
 * and port; `*.example.com` matches its subdomains (not example.com itself);
 * `http://localhost:5173` matches that exact origin.
 */
export function originMatcher (patterns: readonly string[]): (origin: string) => boolean {
  const exactOrigins = new Set(patterns.filter((pattern) => pattern.includes('://')))
  const exactHosts = new Set(patterns.filter((pattern) => !pattern.includes('://') && !pattern.startsWith('*.')))
  const suffixes = patterns.filter((pattern) => pattern.startsWith('*.')).map((pattern) => pattern.slice(1))
  return (origin) => {
    const parsed = parseOrigin(origin)
    if (parsed === null) return false
    if (exactOrigins.has(parsed.origin) || exactHosts.has(parsed.hostname)) return true
    return suffixes.some((suffix) => parsed.hostname.endsWith(suffix) && parsed.hostname.length > suffix.length)
  }
}

/** A well-formed browser Origin (`scheme://host[:port]`, nothing else), or null. */
export function parseOrigin (origin: string): { origin: string, hostname: string } | null {
  if (origin.length > 300 || !/^https?:\/\/[^/?#@\s]+$/i.test(origin)) return null
  try {
    const url = new URL(origin)
    return { origin: url.origin, hostname: url.hostname }
  } catch {
    return null
  }
}
