/*
 * Crafted addresses against the real server process (server.ts): one source sends the inputs
 * that made the RFC 5322 parser backtrack as fast as it can over 8 keep-alive connections for
 * 5 s, with limits out of its way so that every request reaches the address policy. Every
 * answer must be a 400, and another client's /healthz must not stall: before the address cost
 * was bounded, 10 such requests a second took its median from 0.6 ms to 740 ms. What the flood
 * costs the other client is measured by `npm run bench:address-flood` (bench/address-flood.ts).
 */
import t from 'tap'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { CONNECTIONS, flood, healthLatencies, percentile } from '../support/address-flood.js'
import { startServer } from '../support/service-process.js'

const FLOOD_MS = 5000
/** A stall guard, not a performance claim: a median of a few ms is usual, hundreds was the bug. */
const STALLED_MS = 250

t.test(`crafted addresses from one source over ${CONNECTIONS} connections for ${FLOOD_MS / 1000} s: all refused, /healthz never stalls`, async (t) => {
  // The tests' relaxed source limit (100,000 a minute) is within reach of a 5 s flood now.
  const server = await startServer(t, { LOG_LEVEL: 'warn', RATE_LIMIT_SOURCE: '100000000/1m' })
  const port = Number(new URL(server.base).port)

  const until = Date.now() + FLOOD_MS
  const during = healthLatencies(port, () => Date.now() < until)
  const statuses = await flood(port, DEMO_SANDBOX_KEY, until)
  const latencies = (await during).sort((a, b) => a - b)

  const sent = [...statuses.values()].reduce((sum, count) => sum + count, 0)
  t.same([...statuses.keys()], [400], `every crafted address was refused with a 400, none crashed or hung (${sent} sent)`)
  t.ok(sent > 500, `the flood really ran (${sent} requests)`)
  t.ok(latencies.length >= 20, `the other client kept being served (${latencies.length} health checks)`)
  t.ok(percentile(latencies, 0.5) < STALLED_MS, `no stall of the event loop (median /healthz ${percentile(latencies, 0.5).toFixed(1)} ms)`)
})
