import { Agent, request } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { send } from './http.js'

/*
 * A flood of crafted addresses from one source, and a well-behaved client's /healthz beside it:
 * what the abuse test (test/abuse/pathological-addresses.abuse.ts) checks and the benchmark
 * (bench/address-flood.ts) measures. The inputs are the ones that made the RFC 5322 parser
 * backtrack: nested comments and quotes, escapes, long runs of dots and at-signs, long
 * internationalised text.
 */

export const ATTACKER = '127.0.0.20'
export const BYSTANDER = '127.0.0.21'
export const CONNECTIONS = 8

const close = { '(': ')', '"': '"', '<': '>', '[': ']' } as const
export const crafted: readonly string[] = [
  // The reported one: ~1 KB of nested comments.
  `${'('.repeat(500)}a@x.com${')'.repeat(500)}`,
  // The same shapes within the RFC 5321 length limits, where no length check saves the parser.
  ...(['(', '"', '<', '['] as const).flatMap((open) => [
    `${open.repeat(120)}a@x.com${close[open].repeat(120)}`,
    `a${open.repeat(60)}@${'b'.repeat(60)}.com`,
    `${(open + 'a@x.com' + close[open]).repeat(30)}`.slice(0, 254)
  ]),
  `"${'\\"'.repeat(120)}"@example.com`,
  `${'a.'.repeat(30)}@${'b.'.repeat(95)}com`,
  `${'a@'.repeat(127)}`,
  `${'.'.repeat(64)}@${'.'.repeat(189)}`,
  `user@${'例'.repeat(60)}.${'ü'.repeat(60)}`,
  `${'ü'.repeat(64)}@bücher.example`,
  `a(b(c(d(e(f(g(h(i(j@x.com)))))))))${'('.repeat(200)}`,
  '"a\\\\\\\\\\\\\\\\\\\\"@x.com'.padEnd(254, ' '),
  `=?utf-8?q?${'=41'.repeat(80)}?=@example.com`,
  `${'a'.repeat(64)}%${'b'.repeat(60)}@${'c'.repeat(120)}.com`
]

export function percentile (sorted: readonly number[], fraction: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? Number.NaN
}

/**
 * Crafted dispatches from ATTACKER over CONNECTIONS keep-alive connections, back to back, until
 * `until` (epoch ms). Returns how many answers of each status came back.
 */
export async function flood (port: number, key: string, until: number): Promise<Map<number, number>> {
  const statuses = new Map<number, number>()
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS })
  try {
    await Promise.all(Array.from({ length: CONNECTIONS }, async (_, index) => {
      for (let i = index; Date.now() < until; i += CONNECTIONS) {
        const body = JSON.stringify({ email: crafted[i % crafted.length] })
        const status = await new Promise<number>((resolve, reject) => {
          const outgoing = request({
            host: '127.0.0.1',
            port,
            method: 'POST',
            path: '/otp/request',
            agent,
            localAddress: ATTACKER,
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
          }, (response) => {
            response.resume()
            response.on('end', () => { resolve(response.statusCode ?? 0) })
          })
          outgoing.on('error', reject)
          outgoing.end(body)
        })
        statuses.set(status, (statuses.get(status) ?? 0) + 1)
      }
    }))
  } finally {
    agent.destroy()
  }
  return statuses
}

/** /healthz from BYSTANDER, one request every 20 ms or so, while `running()`: latencies in ms. */
export async function healthLatencies (port: number, running: () => boolean): Promise<number[]> {
  const latencies: number[] = []
  while (running()) {
    const started = performance.now()
    const answer = await send({ port, method: 'GET', path: '/healthz', localAddress: BYSTANDER })
    if (answer.status === 200) latencies.push(performance.now() - started)
    await sleep(20)
  }
  return latencies
}
