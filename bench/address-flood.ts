/*
 * What a flood of crafted addresses from one source costs everyone else: the service built in
 * dist/, limits out of the way so every request reaches the address policy; 2 s of another
 * client's /healthz alone, then the same during 5 s of crafted dispatches over 8 keep-alive
 * connections (the inputs that made the RFC 5322 parser backtrack). Prints the flood's rate and
 * answers, and /healthz's median and p95 before and during. The abuse suite
 * (test/abuse/pathological-addresses.abuse.ts) runs the same flood with a stall guard only.
 *
 *   npm run bench:address-flood
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { CONNECTIONS, flood, healthLatencies, percentile } from '../test/support/address-flood.js'
import { Resources, runWithResources } from './support/children.js'
import { benchTenant, startService } from './support/service.js'

const BASELINE_MS = 2000
const FLOOD_MS = 5000

function summary (latencies: number[]): string {
  const sorted = [...latencies].sort((a, b) => a - b)
  return `median ${percentile(sorted, 0.5).toFixed(2)} ms, p95 ${percentile(sorted, 0.95).toFixed(2)} ms (n=${sorted.length})`
}

async function main (resources: Resources): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-address-flood-'))
  resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })
  const tenant = benchTenant(dir)
  const service = await startService(resources, { name: 'email-otp', dir, env: tenant.env })
  const port = Number(new URL(service.child.url).port)

  let baselineRunning = true
  const baselineRun = healthLatencies(port, () => baselineRunning)
  await sleep(BASELINE_MS)
  baselineRunning = false
  const baseline = await baselineRun

  const until = Date.now() + FLOOD_MS
  const during = healthLatencies(port, () => Date.now() < until)
  const statuses = await flood(port, tenant.liveKey, until)
  const attacked = await during

  const sent = [...statuses.values()].reduce((sum, count) => sum + count, 0)
  process.stdout.write([
    `crafted-address flood, ${cpus()[0]?.model ?? 'unknown'} × ${cpus().length}, node ${process.version}`,
    `  flood: ${sent} dispatches from one source over ${CONNECTIONS} connections in ${FLOOD_MS / 1000} s (${Math.round(sent / (FLOOD_MS / 1000))}/s): ` +
      [...statuses].map(([status, count]) => `${count} × ${status}`).join(', '),
    `  /healthz from another address before: ${summary(baseline)}`,
    `  /healthz from another address during: ${summary(attacked)}`,
    ''
  ].join('\n'))
}

await runWithResources(main)
