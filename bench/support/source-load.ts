import { Agent } from 'node:http'
import type { LoadResult, NextRequest } from './load.js'
import { PostTally } from './post-tally.js'

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
  const tally = new PostTally()
  const started = performance.now()
  const deadline = started + spec.seconds * 1000

  const once = async (): Promise<void> => {
    await tally.post(agent, target, spec.path, spec.headers, spec.next(), performance.now())
  }
  const connection = async (): Promise<void> => {
    while (performance.now() < deadline) await once()
  }
  await Promise.all(Array.from({ length: spec.connections }, connection))
  agent.destroy()
  return tally.result(started)
}
