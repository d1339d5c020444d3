import { request, type Agent } from 'node:http'
import type { LoadResult, NextRequest } from './load.js'

/**
 * POSTs on keep-alive node:http agents (the loaders autocannon cannot be: a chosen source
 * address, a steady pace), each answer's latency and status tallied into one LoadResult.
 */
export class PostTally {
  readonly #latencies: number[] = []
  readonly #statuses: Record<string, number> = {}
  #unexpected = 0
  #errors = 0
  #lastAnswer = 0

  /** Sends `next` and counts its latency from `since` (its send, or when it was due). */
  async post (agent: Agent, target: URL, path: string, headers: Record<string, string>, next: NextRequest, since: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const outgoing = request({
        agent,
        host: target.hostname,
        port: target.port,
        method: 'POST',
        path,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(next.body), ...headers }
      }, (response) => {
        response.resume()
        response.on('end', () => {
          const now = performance.now()
          this.#latencies.push(now - since)
          this.#lastAnswer = now
          const status = response.statusCode ?? 0
          this.#statuses[status] = (this.#statuses[status] ?? 0) + 1
          if (status !== next.expected) this.#unexpected++
          resolve()
        })
        response.on('error', () => { this.#errors++; resolve() })
      })
      outgoing.on('error', () => { this.#errors++; resolve() })
      outgoing.end(next.body)
    })
  }

  /** The run from `started` to the last answer. */
  result (started: number): LoadResult {
    const latencies = this.#latencies.sort((a, b) => a - b)
    const seconds = (this.#lastAnswer - started) / 1000
    const percentile = (fraction: number): number => latencies.length === 0 ? Number.NaN : latencies[Math.min(latencies.length - 1, Math.ceil(fraction * latencies.length) - 1)] as number
    return { requests: latencies.length, seconds, rps: seconds > 0 ? latencies.length / seconds : 0, p50: percentile(0.5), p99: percentile(0.99), statuses: this.#statuses, unexpected: this.#unexpected, errors: this.#errors }
  }
}
