/*
 * Whether a page can tell a suppressed mailbox from a provider's refusal by the time its
 * answer takes. The service built in dist/, on memory and then on a private redis-server,
 * sends through a real SMTP relay in its own process (bench/smtp-sink.ts) that refuses
 * gone@example.com with 550; ada@example.com is suppressed. Through the tenant's restricted
 * key, one request at a time on a kept-alive connection, in a random order within each round:
 * a dispatch to the refused address, one to the suppressed mailbox, and one to a new address
 * the relay accepts (for reference). After a warm-up, prints each answer's latency quantiles,
 * the difference of the two 502s' medians and 90th percentiles, and the two-sample
 * Kolmogorov-Smirnov statistic with its p-value (a large p: nothing tells the two apart).
 *
 *   npm run bench:suppressed [-- --samples 200] [-- --store memory|redis]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { randomInt } from 'node:crypto'
import { generateKey, hashKey } from '../lib/keys/api-keys.js'
import { freePort, startRedis } from '../test/support/redis.js'
import { BASE_ENV, ROOT, benchTenant, benchTenantsDocument, startService } from './support/service.js'
import { type Resources, runWithResources, startNodeChild } from './support/children.js'

function option (name: string, fallback: string): string {
  const at = process.argv.indexOf(name)
  return at === -1 ? fallback : process.argv[at + 1] ?? fallback
}

const SAMPLES = Number(option('--samples', '200'))
const STORES = option('--store', 'memory,redis').split(',')
const WARM_UP = 20
const REFUSED = 'gone@example.com'
const SUPPRESSED = 'ada@example.com'
const ORIGIN = 'https://app.bench.example'

type Answer = 'refused' | 'suppressed' | 'accepted'

/** One POST on `agent`: its status and how long the answer took, in ms. */
async function post (port: number, agent: Agent, path: string, headers: Record<string, string>, body: unknown): Promise<{ status: number, ms: number }> {
  const payload = JSON.stringify(body)
  const started = performance.now()
  return await new Promise((resolve, reject) => {
    const outgoing = request({ host: '127.0.0.1', port, method: 'POST', path, agent, headers: { ...headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) } }, (response) => {
      response.resume()
      response.on('end', () => { resolve({ status: response.statusCode ?? 0, ms: performance.now() - started }) })
    })
    outgoing.on('error', reject)
    outgoing.end(payload)
  })
}

function quantile (sorted: readonly number[], fraction: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(fraction * sorted.length) - 1))] ?? Number.NaN
}

/** The two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value. */
function kolmogorovSmirnov (a: readonly number[], b: readonly number[]): { d: number, p: number } {
  const x = [...a].sort((m, n) => m - n)
  const y = [...b].sort((m, n) => m - n)
  let i = 0
  let j = 0
  let d = 0
  while (i < x.length && j < y.length) {
    const value = Math.min(x[i] ?? Infinity, y[j] ?? Infinity)
    while (i < x.length && (x[i] ?? Infinity) <= value) i++
    while (j < y.length && (y[j] ?? Infinity) <= value) j++
    d = Math.max(d, Math.abs(i / x.length - j / y.length))
  }
  const effective = Math.sqrt(x.length * y.length / (x.length + y.length))
  const lambda = (effective + 0.12 + 0.11 / effective) * d
  let p = 0
  for (let k = 1; k <= 100; k++) p += 2 * (-1) ** (k - 1) * Math.exp(-2 * k * k * lambda * lambda)
  return { d, p: Math.min(1, Math.max(0, p)) }
}

function row (store: string, answer: Answer, latencies: readonly number[]): string {
  const sorted = [...latencies].sort((a, b) => a - b)
  const mean = sorted.reduce((sum, ms) => sum + ms, 0) / sorted.length
  const cells = [sorted[0] ?? Number.NaN, ...[0.1, 0.25, 0.5, 0.75, 0.9, 0.99].map((fraction) => quantile(sorted, fraction)), mean]
  return `${store.padEnd(7)} ${answer.padEnd(10)} ${String(sorted.length).padStart(4)} ${cells.map((ms) => ms.toFixed(2).padStart(7)).join('')}`
}

async function main (resources: Resources): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-suppressed-'))
  resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })
  const tenant = benchTenant(dir)
  const pageKey = generateKey('restricted', 'live')
  const document = benchTenantsDocument(tenant.liveKey)
  document.tenants[0]?.keys.push({ id: 'k_page', kind: 'restricted', mode: 'live', sha256: hashKey(pageKey), origins: ['app.bench.example'] })
  const tenantsFile = join(dir, 'tenants-page.json')
  writeFileSync(tenantsFile, JSON.stringify(document))

  const relayPort = await freePort()
  const relay = await startNodeChild({ name: 'SMTP relay', args: [fileURLToPath(new URL('./smtp-sink.js', import.meta.url))], cwd: ROOT, env: { ...BASE_ENV, PORT: String(relayPort), REFUSE: REFUSED }, port: relayPort, stdout: 'ignore', readyPath: null })
  resources.add(relay.stop)
  const env = { ...tenant.env, TENANTS_FILE: tenantsFile, MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${relayPort}?tls=off`, MAIL_FROM: 'Bench <no-reply@bench.example>' }

  process.stdout.write(`a page's dispatch: suppressed mailbox vs the relay's refusal, ${SAMPLES} samples each after ${WARM_UP} rounds, ${cpus()[0]?.model ?? 'unknown'} × ${cpus().length}, node ${process.version}\n`)
  process.stdout.write('store   answer        n     min    p10    p25    p50    p75    p90    p99   mean (ms)\n')
  for (const store of STORES) {
    const redis = store === 'redis' ? await startRedis() : null
    if (redis !== null) resources.add(redis.stop)
    const service = await startService(resources, { name: `email-otp (${store})`, dir, env: { ...env, ...(redis === null ? {} : { REDIS_URL: redis.url }) } })
    const port = Number(new URL(service.child.url).port)
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    const suppressed = await post(port, agent, '/recipients/suppress', { authorization: `Bearer ${tenant.liveKey}` }, { email: SUPPRESSED })
    if (suppressed.status !== 200) throw new Error(`suppressing answered ${suppressed.status}`)

    const latencies: Record<Answer, number[]> = { refused: [], suppressed: [], accepted: [] }
    const expected: Record<Answer, number> = { refused: 502, suppressed: 502, accepted: 200 }
    let fresh = 0
    for (let round = 0; round < WARM_UP + SAMPLES; round++) {
      const order: Answer[] = ['refused', 'suppressed', 'accepted']
      for (let i = order.length - 1; i > 0; i--) {
        const j = randomInt(i + 1)
        const swapped = order[j] as Answer
        order[j] = order[i] as Answer
        order[i] = swapped
      }
      for (const answer of order) {
        const email = answer === 'refused' ? REFUSED : answer === 'suppressed' ? SUPPRESSED : `bench.page${++fresh}@example.com`
        const sent = await post(port, agent, '/otp/request', { authorization: `Bearer ${pageKey}`, origin: ORIGIN }, { email })
        if (sent.status !== expected[answer]) throw new Error(`${answer}: ${sent.status}, expected ${expected[answer]}`)
        if (round >= WARM_UP) latencies[answer].push(sent.ms)
      }
    }
    agent.destroy()
    await service.child.stop()
    await redis?.stop()

    for (const answer of ['refused', 'suppressed', 'accepted'] as const) process.stdout.write(`${row(store, answer, latencies[answer])}\n`)
    const refused = [...latencies.refused].sort((a, b) => a - b)
    const withheld = [...latencies.suppressed].sort((a, b) => a - b)
    const { d, p } = kolmogorovSmirnov(refused, withheld)
    process.stdout.write(`${store}: suppressed − refused: median ${(quantile(withheld, 0.5) - quantile(refused, 0.5)).toFixed(2)} ms, p90 ${(quantile(withheld, 0.9) - quantile(refused, 0.9)).toFixed(2)} ms; Kolmogorov-Smirnov D = ${d.toFixed(3)}, p = ${p.toFixed(3)}\n`)
  }
}

await runWithResources(main)
