/*
 * What a reload of a large tenants file costs another tenant's requests. The service built in
 * dist/ loads a file of about 2.8 MB, within TENANTS_FILE_MAX_BYTES and the schema: the bench
 * tenant, and a tenant `big` with 100,000 blocked networks and 10,000 denied domains. The bench
 * tenant's `GET /usage` is asked one request at a time, 5 ms apart, for 3 s alone, then around
 * each of three reloads of the watched file: `big` changes one domain (its lists are checked and
 * built again), the bench tenant gains a key (big's lists are reused), and `big` changes one
 * network. Prints each phase's answer times (p50, p90, max), how long it lasted, the service's
 * own event-loop delay (the longest, from its /metrics) and major garbage collection in it,
 * and the service's figures for the reload (turns, the most units and CPU time one took, lists
 * built and reused). On a shared machine the answer times also hold the time the service waited
 * for a core; the event-loop delay and the loader's CPU time per turn do not.
 *
 *   npm run bench:reload-stall [-- --reloads 3]
 */
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { randomBytes } from 'node:crypto'
import { generateKey, hashKey } from '../lib/keys/api-keys.js'
import type { TenantsFile } from '../schemas/tenants.js'
import { benchTenant, startService } from './support/service.js'
import { type Resources, runWithResources } from './support/children.js'

const at = process.argv.indexOf('--reloads')
const RELOADS = at === -1 ? 3 : Number(process.argv[at + 1])
const PAUSE_MS = 5

/** One GET on `agent`: its status and how long the answer took, in ms. */
async function get (port: number, agent: Agent, path: string, key: string): Promise<{ status: number, ms: number }> {
  const started = performance.now()
  return await new Promise((resolve, reject) => {
    const outgoing = request({ host: '127.0.0.1', port, method: 'GET', path, agent, headers: { authorization: `Bearer ${key}` } }, (response) => {
      response.resume()
      response.on('end', () => { resolve({ status: response.statusCode ?? 0, ms: performance.now() - started }) })
    })
    outgoing.on('error', reject)
    outgoing.end()
  })
}

function summary (latencies: readonly number[]): string {
  const sorted = [...latencies].sort((a, b) => a - b)
  const quantile = (fraction: number): number => sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)] ?? Number.NaN
  return `n ${String(sorted.length).padStart(4)}  p50 ${quantile(0.5).toFixed(1).padStart(6)}  p90 ${quantile(0.9).toFixed(1).padStart(6)}  max ${(sorted.at(-1) ?? Number.NaN).toFixed(1).padStart(7)} ms`
}

async function main (resources: Resources): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-reload-'))
  resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })
  const tenant = benchTenant(dir)
  const document: TenantsFile = structuredClone(tenant.document)
  document.tenants.push({
    id: 'big',
    tier: 'bench',
    keys: [{ id: 'k_big', kind: 'secret', mode: 'live', sha256: hashKey(generateKey('secret', 'live')) }],
    blockedNetworks: Array.from({ length: 100_000 }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}/32`),
    recipients: { denyDomains: Array.from({ length: 10_000 }, (_, i) => `d${i}.${'a'.repeat(41)}.${'b'.repeat(51)}.example`) }
  })
  // A folder of its own: the service's log is written in `dir`, and the folder watch waits for quiet.
  mkdirSync(join(dir, 'tenants'))
  const tenantsFile = join(dir, 'tenants', 'tenants.json')
  // As the kubelet and `keys create` do: written beside, renamed over the watched file.
  const replace = (file: TenantsFile): void => {
    writeFileSync(`${tenantsFile}.next`, JSON.stringify(file))
    renameSync(`${tenantsFile}.next`, tenantsFile)
  }
  replace(document)
  const metricsToken = randomBytes(24).toString('hex')
  const service = await startService(resources, { name: 'email-otp (reload)', dir, env: { ...tenant.env, TENANTS_FILE: tenantsFile, LOG_LEVEL: 'info', METRICS_TOKEN: metricsToken } })
  const port = Number(new URL(service.child.url).port)
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  resources.add(async () => { agent.destroy() })
  const logLines = (): string[] => readFileSync(service.mailLog, 'utf8').split('\n').filter((line) => line.includes('"msg":"tenants file re'))

  /** The longest event-loop delay since the last call (prom-client resets it on each scrape) and the major GC time so far, in ms. */
  async function loop (): Promise<{ lagMaxMs: number, majorGcMs: number }> {
    const text = await fetch(`${service.child.url}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } }).then(async (response) => await response.text())
    const value = (pattern: RegExp): number => Number(pattern.exec(text)?.[1] ?? Number.NaN) * 1000
    return { lagMaxMs: value(/^email_otp_nodejs_eventloop_lag_max_seconds (\S+)$/m), majorGcMs: value(/^email_otp_nodejs_gc_duration_seconds_sum\{kind="major"\} (\S+)$/m) }
  }
  /** A phase: answer times, its length, and the service's own figures over it. */
  async function phase (until: Promise<unknown>): Promise<string> {
    const before = await loop()
    const started = performance.now()
    const latencies = await sample(until)
    const lasted = performance.now() - started
    const after = await loop()
    return `${summary(latencies)} over ${(lasted / 1000).toFixed(1)} s; event loop delay max ${after.lagMaxMs.toFixed(1)} ms, major GC ${(after.majorGcMs - before.majorGcMs).toFixed(0)} ms`
  }
  /** Answer times of `/usage` until `until` resolves, then 300 ms more. */
  async function sample (until: Promise<unknown>): Promise<number[]> {
    let done = false
    void until.then(() => { done = true })
    const latencies: number[] = []
    let stopAt = Number.POSITIVE_INFINITY
    while (performance.now() < stopAt) {
      if (done && stopAt === Number.POSITIVE_INFINITY) stopAt = performance.now() + 300
      const answer = await get(port, agent, '/usage', tenant.liveKey)
      if (answer.status !== 200) throw new Error(`/usage answered ${answer.status}`)
      latencies.push(answer.ms)
      await sleep(PAUSE_MS)
    }
    return latencies
  }
  /** Resolves once the service has logged `count` reload results. */
  async function reloaded (count: number): Promise<void> {
    while (logLines().filter((line) => /"msg":"tenants file reload(ed| failed)/.test(line)).length < count) await sleep(20)
  }

  process.stdout.write(`tenants file ${JSON.stringify(document).length} bytes; ${cpus()[0]?.model ?? 'unknown'} × ${cpus().length}, node ${process.version}\n`)
  process.stdout.write(`baseline                           ${await phase(sleep(2700))}\n`)
  const changes: Array<[string, (file: TenantsFile, round: number) => void]> = [
    ['big: one domain changed', (file, round) => { file.tenants[1]!.recipients!.denyDomains![0] = `changed${round}.example` }],
    ['bench: a key added', (file, round) => { file.tenants[0]!.keys.push({ id: `k_added${round}`, kind: 'secret', mode: 'live', sha256: hashKey(generateKey('secret', 'live')) }) }],
    ['big: one network changed', (file, round) => { file.tenants[1]!.blockedNetworks![0] = `192.0.2.${round}/32` }]
  ]
  for (let round = 1; round <= RELOADS; round++) {
    const [label, change] = changes[(round - 1) % changes.length]!
    change(document, round)
    const before = logLines().filter((line) => /"msg":"tenants file reload(ed| failed)/.test(line)).length
    const figures = await phase((async () => {
      await sleep(300)
      replace(document)
      await reloaded(before + 1)
    })())
    const line = logLines().filter((line) => /"msg":"tenants file reload(ed| failed)/.test(line)).at(-1) ?? '{}'
    const { turns, lists, msg } = JSON.parse(line) as { turns?: unknown, lists?: unknown, msg?: string }
    process.stdout.write(`reload ${round}: ${label.padEnd(25)} ${figures}\n          ${msg ?? '?'}: turns ${JSON.stringify(turns ?? null)} lists ${JSON.stringify(lists ?? null)}\n`)
    // The folder watch may see the rename as several changes: the next phase starts once they are read.
    await sleep(1000)
  }
}

await runWithResources(main)
