import { Agent, request } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import type { LoadResult, NextRequest } from './load.js'

/**
 * Requests at a steady rate, each sent when its time comes: the load of users arriving on their
 * own. autocannon's `overallRate` gives each connection its share of a second at the start of
 * the second, so a "rate" run is bursts at full speed followed by silence, and its p99 is a
 * saturated run's. Here request n is due at start + n / rate; a tick every millisecond sends
 * what is due on keep-alive connections (at most `connections` in flight; one that finds none
 * free waits for one). Latency counts from when the request was due, so the wait for a free
 * connection is part of it (no coordinated omission).
 */
export async function runPacedLoad (spec: {
  url: string
  path: string
  headers: Record<string, string>
  connections: number
  rate: number
  seconds: number
  next: () => NextRequest
}): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: spec.connections })
  const target = new URL(spec.url)
  const latencies: number[] = []
  const statuses: Record<string, number> = {}
  let unexpected = 0
  let errors = 0
  let lastAnswer = 0
  const answers: Array<Promise<void>> = []

  const send = async (due: number): Promise<void> => {
    const next = spec.next()
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
          latencies.push(now - due)
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

  const started = performance.now()
  const total = Math.floor(spec.rate * spec.seconds)
  const interval = 1000 / spec.rate
  let sent = 0
  while (sent < total) {
    const now = performance.now()
    for (; sent < total && started + sent * interval <= now; sent++) answers.push(send(started + sent * interval))
    await sleep(1)
  }
  await Promise.all(answers)
  agent.destroy()

  const seconds = (lastAnswer - started) / 1000
  latencies.sort((a, b) => a - b)
  const percentile = (fraction: number): number => latencies.length === 0 ? Number.NaN : latencies[Math.min(latencies.length - 1, Math.ceil(fraction * latencies.length) - 1)] as number
  return { requests: latencies.length, seconds, rps: seconds > 0 ? latencies.length / seconds : 0, p50: percentile(0.5), p99: percentile(0.99), statuses, unexpected, errors }
}
