import { Agent } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import type { LoadResult, NextRequest } from './load.js'
import { PostTally } from './post-tally.js'

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
  const tally = new PostTally()
  const answers: Array<Promise<void>> = []
  const send = async (due: number): Promise<void> => { await tally.post(agent, target, spec.path, spec.headers, spec.next(), due) }

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
  return tally.result(started)
}
