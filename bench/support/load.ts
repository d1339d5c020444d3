import autocannon from 'autocannon'

/** One request of a run: its body, the status it should get, and an optional label for onResponse. */
export interface NextRequest {
  body: string
  expected: number
  tag?: string
}

/** A run lasts `seconds`, or until `amount` requests are answered. */
export type LoadSpec = {
  url: string
  path: string
  headers: Record<string, string>
  connections: number
  /** Requests per second over all connections; as fast as answers come when not given. */
  rate?: number
  /** Called once per request, just before it is sent. */
  next: () => NextRequest
  onResponse?: (status: number, body: string, tag: string | undefined) => void
} & ({ seconds: number } | { amount: number })

export interface LoadResult {
  requests: number
  /** From the first send to the last answer. */
  seconds: number
  rps: number
  p50: number
  p99: number
  /** Answers by HTTP status. */
  statuses: Record<string, number>
  /** Answers whose status was not the one `next` announced. */
  unexpected: number
  /** Connection errors and timeouts (autocannon counts timeouts among errors). */
  errors: number
}

/**
 * Runs autocannon (POST, keep-alive, one request in flight per connection) and measures
 * latency from every answer rather than from autocannon's histogram, which keeps whole
 * milliseconds only: at the latencies measured here that would round p50 to 1, 2 or 3 ms.
 * Throughput is timed here too: autocannon notices the end of an `amount` run only at its
 * next one-second tick, which would understate short runs by up to a second.
 */
export async function runLoad (spec: LoadSpec): Promise<LoadResult> {
  const latencies: number[] = []
  const statuses: Record<string, number> = {}
  let unexpected = 0
  let lastAnswer = 0
  const started = performance.now()
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon({
      url: spec.url,
      connections: spec.connections,
      ...(spec.rate === undefined ? {} : { overallRate: spec.rate }),
      ...('amount' in spec ? { amount: spec.amount } : { duration: spec.seconds }),
      requests: [{
        method: 'POST',
        path: spec.path,
        headers: { 'content-type': 'application/json', ...spec.headers },
        // With one request in flight per connection, the connection's context carries the
        // expectation of the request being answered.
        setupRequest: (request, context) => {
          const next = spec.next()
          context.expected = next.expected
          context.tag = next.tag
          return { ...request, body: next.body }
        },
        onResponse: (status, body, context) => {
          if (status !== context.expected) unexpected++
          spec.onResponse?.(status, body, context.tag as string | undefined)
        }
      }]
    }, (error, finished) => { if (error === null) resolve(finished); else reject(error) })
    instance.on('response', (_client: unknown, status: number, _bytes: number, milliseconds: number) => {
      latencies.push(milliseconds)
      statuses[status] = (statuses[status] ?? 0) + 1
      lastAnswer = performance.now()
    })
  })
  const seconds = (lastAnswer - started) / 1000
  latencies.sort((a, b) => a - b)
  return {
    requests: latencies.length,
    seconds,
    rps: seconds > 0 ? latencies.length / seconds : 0,
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    statuses,
    unexpected,
    errors: result.errors
  }
}

function percentile (sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) return Number.NaN
  return sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)] as number
}
