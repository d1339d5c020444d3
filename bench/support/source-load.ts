import { Agent, request } from 'node:http'
import type { LoadResult, NextRequest } from './load.js'

/**
 * A run from one loopback source address (127.0.0.x): autocannon always connects from the
 * kernel's choice, and per-source answers (403 from a blocked source, 429 over the
 * per-source limit) need the address to be one the service was told about. Keep-alive
 * connections, one request in flight on each, like runLoad; latency is measured from the
 * send to the end of the answer.
 */
export async function runLoadFrom (spec: {
  url: string
  path: string
  headers: Record<string, string>
  connections: number
  seconds: number
  localAddress: string
  next: () => NextRequest
}): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: spec.connections, localAddress: spec.localAddress })
  const target = new URL(spec.url)
  const latencies: number[] = []
  const statuses: Record<string, number> = {}
  let unexpected = 0
  let errors = 0
  let lastAnswer = 0
  const started = performance.now()
  const deadline = started + spec.seconds * 1000

  const once = async (): Promise<void> => {
    const next = spec.next()
    const sent = performance.now()
    await new Promise<void>((resolve) => {
      const outgoing = request({
        agent,
        host: target.hostname,
        port: target.port,
        method: 'POST',
        path: spec.path,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(next.body), ...spec.headers }
      }, (response) => {
        response.resume()
        response.on('end', () => {
          const now = performance.now()
          latencies.push(now - sent)
          lastAnswer = now
          const status = response.statusCode ?? 0
          statuses[status] = (statuses[status] ?? 0) + 1
          if (status !== next.expected) unexpected++
          resolve()
        })
        response.on('error', () => { errors++; resolve() })
      })
      outgoing.on('error', () => { errors++; resolve() })
      outgoing.end(next.body)
    })
  }
  const connection = async (): Promise<void> => {
    while (performance.now() < deadline) await once()
  }
  await Promise.all(Array.from({ length: spec.connections }, connection))
  agent.destroy()

  const seconds = (lastAnswer - started) / 1000
  latencies.sort((a, b) => a - b)
  const percentile = (fraction: number): number => latencies.length === 0 ? Number.NaN : latencies[Math.min(latencies.length - 1, Math.ceil(fraction * latencies.length) - 1)] as number
  return { requests: latencies.length, seconds, rps: seconds > 0 ? latencies.length / seconds : 0, p50: percentile(0.5), p99: percentile(0.99), statuses, unexpected, errors }
}
