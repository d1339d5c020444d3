/*
 * What a calm tenant feels while another tenant floods every surface it is allowed: the
 * service built in dist/, first on the embedded in-memory default, then on a private
 * redis-server, each in a process of its own. For each store, the calm tenant's baseline
 * (`--rate` dispatch + sandbox inbox + verify flows a second through its secret sandbox key,
 * on a fixed schedule) and then, back to back, the same flows while the noisy tenant floods:
 * dispatch through its secret keys with fresh addresses and End-User-IPs, dispatch through
 * its public keys, junk verifies, previews of its costliest accepted template
 * (test/support/preview-attack.ts), and `verification.failed` events to 20 webhook endpoints
 * that accept the connection and never answer, from several loopback source addresses. The
 * noisy tenant has the default limits; the calm tenant's are out of the way of its 200 flows
 * a second. See bench/noisy-neighbour.md.
 *
 *   npm run bench:noisy [-- --quick] [--store memory|redis] [--surface previews,webhooks,…]
 *                        [--rate 200] [--loops 8] [--lead 2] [--cpu-prof] [--per-second] [--service-env NAME=value …]
 */
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, type Socket } from 'node:net'
import { cpus, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { on } from 'node:events'
import { Worker } from 'node:worker_threads'
import { generateKey, hashKey } from '../lib/keys/api-keys.js'
import type { TenantsFile } from '../schemas/tenants.js'
import { ATTACK_MINUTES, costliestPart } from '../test/support/preview-attack.js'
import { freePort, startRedis } from '../test/support/redis.js'
import { cpuSeconds, Resources, startNodeChild, runWithResources } from './support/children.js'
import { BASE_ENV, ROOT } from './support/service.js'
import { SURFACES, type CalmJob, type CalmMessage, type CalmResult, type FloodJob, type FloodResult, type Surface } from './noisy-neighbour-load.js'

const { values: options } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    store: { type: 'string', multiple: true },
    surface: { type: 'string', multiple: true },
    rate: { type: 'string', default: '200' },
    loops: { type: 'string', default: '8' },
    'cpu-prof': { type: 'boolean', default: false },
    'per-second': { type: 'boolean', default: false },
    lead: { type: 'string', default: '2' },
    'service-env': { type: 'string', multiple: true }
  }
})

const QUICK = options.quick === true
const RATE = Number(options.rate)
const LOOPS = Number(options.loops)
/** Warm-up, baseline and noisy phase of each store, in seconds. */
const PHASES = QUICK ? { warmup: 2, baseline: 8, noisy: 12 } : { warmup: 3, baseline: 30, noisy: 60 }
/** How long the flood runs before the calm tenant's noisy phase starts: the hanging endpoints fill their slots. */
const FLOOD_LEAD_S = Number(options.lead)
const CALM_TIMEOUT_MS = 30_000
const HANGING_ENDPOINTS = 20
const KEYS_PER_KIND = 4
const CALM_SOURCE = '127.0.0.7'
/** The flood's source addresses: 127.0.0.20–127.0.0.27. */
const FLOOD_SOURCES = Array.from({ length: 8 }, (_, index) => `127.0.0.${20 + index}`)
const ORIGIN = 'https://app.noisy.test'
const HUGE = '100000000/1m'

const stores = (options.store ?? ['memory', 'redis']).flatMap((value) => value.split(','))
const surfaces = (options.surface ?? [...SURFACES]).flatMap((value) => value.split(',')) as Surface[]
for (const store of stores) if (store !== 'memory' && store !== 'redis') throw new Error(`--store: memory or redis, not ${store}`)
for (const surface of surfaces) if (!SURFACES.includes(surface)) throw new Error(`--surface: one of ${SURFACES.join(', ')}, not ${surface}`)
if (!(RATE > 0) || !(LOOPS > 0)) throw new Error('--rate and --loops are positive numbers')
if (!(FLOOD_LEAD_S >= 0)) throw new Error('--lead: seconds, 0 or more')
/** The service's settings changed for this run (e.g. a control off, to compare with it on). */
const SERVICE_ENV = Object.fromEntries((options['service-env'] ?? []).map((setting) => {
  const equals = setting.indexOf('=')
  if (equals < 1) throw new Error(`--service-env: NAME=value, not ${setting}`)
  return [setting.slice(0, equals), setting.slice(equals + 1)]
}))

interface Phase {
  flows: number
  succeeded: number
  p50: number
  p99: number
  max: number
  flowsPerSecond: number
  problems: Record<string, number>
  /** The successful flows by the second of the phase they were scheduled in: where the tail comes from. */
  perSecond: Array<{ second: number, flows: number, p50: number, p99: number, max: number }>
}

interface StoreRun {
  store: string
  baseline: Phase
  noisy: Phase
  /** p99 noisy / p99 baseline. */
  p99Ratio: number
  flood: {
    requestsPerSecond: number
    /**
     * CPU µs the service spent per flood request: its CPU from the flood's start to its end,
     * less what the calm flows cost at the baseline's rate. Unlike the latencies, this hardly
     * moves when other work shares the machine.
     */
    serviceCpuPerRequestUs: number
    /** The flood's requests that were served (2xx answers) a second: its admitted work, not starved. */
    admittedPerSecond: number
    surfaces: Array<FloodResult & { rps: number }>
  }
  /** CPU seconds the service process (and redis-server) spent per second of each phase. */
  cpu: { baseline: number, noisy: number, redisBaseline: number | null, redisNoisy: number | null, generatorBaseline: number, generatorNoisy: number }
  /** The service's peak resident memory (VmHWM) at the end of each phase, MiB. */
  peakRssMiB: { baseline: number, noisy: number }
  /** The isolation bound (×2), the target of the performance work (×1.1), every flow. */
  goal: { p99Within2x: boolean, p99WithinTarget: boolean, everyFlowSucceeded: boolean }
}

/** The calm tenant's p99 under the flood, at most this many times its baseline: the performance target. */
const P99_TARGET_RATIO = 1.1

function peakRssMiB (pid: number): number {
  try {
    const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return match?.[1] === undefined ? Number.NaN : Number(match[1]) / 1024
  } catch {
    return Number.NaN
  }
}

function percentile (sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) return Number.NaN
  return sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)] as number
}

function phase (result: CalmResult): Phase {
  const sorted = [...result.latencies].sort((a, b) => a - b)
  const bySecond: number[][] = []
  result.latencies.forEach((latency, index) => { (bySecond[Math.floor((result.scheduledAt[index] as number) / 1000)] ??= []).push(latency) })
  const perSecond = [...bySecond.entries()].map(([second, latencies = []]) => {
    const inSecond = latencies.sort((a, b) => a - b)
    return { second, flows: inSecond.length, p50: percentile(inSecond, 0.5), p99: percentile(inSecond, 0.99), max: inSecond.at(-1) ?? Number.NaN }
  })
  return {
    flows: result.flows,
    succeeded: result.succeeded,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    max: sorted.at(-1) ?? Number.NaN,
    flowsPerSecond: result.seconds > 0 ? result.succeeded / result.seconds : 0,
    problems: result.problems,
    perSecond
  }
}

/** Every load generator still running: terminated when the run ends early (an error, a signal). */
const threads = new Set<Worker>()

function startThread (job: CalmJob | FloodJob): Worker {
  const thread = new Worker(new URL('./noisy-neighbour-load.js', import.meta.url), { workerData: job })
  threads.add(thread)
  thread.once('exit', () => { threads.delete(thread) })
  return thread
}

/** A thread's one result: its message, or a rejection when it fails or exits without one. */
async function result<T> (thread: Worker, label: string): Promise<T> {
  return await new Promise<T>((resolve, reject) => {
    thread.once('message', resolve)
    thread.once('error', reject)
    thread.once('exit', (code) => { reject(new Error(`${label} worker exited (${code}) without a result`)) })
  })
}

/** Webhook endpoints that accept every connection and never answer; each socket is held until close. */
async function hangingEndpoints (resources: Resources, count: number): Promise<string[]> {
  const urls: string[] = []
  for (let i = 0; i < count; i++) {
    const sockets = new Set<Socket>()
    const server = createServer((socket) => {
      sockets.add(socket)
      socket.on('error', () => {})
      socket.on('close', () => { sockets.delete(socket) })
      socket.resume()
    })
    await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
    const address = server.address()
    if (address === null || typeof address === 'string') throw new Error('no port')
    urls.push(`http://127.0.0.1:${address.port}/hook`)
    resources.add(async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
    })
  }
  return urls
}

interface Deployment {
  env: Record<string, string>
  calmKey: string
  noisy: { secretKeys: string[], testKeys: string[], publicKeys: string[] }
}

/**
 * Two tenants. `calm`: one secret sandbox key, limits out of the way of its flows. `noisy`:
 * the default limits, secret live and test keys, public keys for its page, the costliest
 * template the load accepts, and HANGING_ENDPOINTS webhooks for `verification.failed`.
 */
function deployment (dir: string, hooks: string[]): Deployment {
  const calmKey = generateKey('secret', 'test')
  const noisy = {
    secretKeys: Array.from({ length: KEYS_PER_KIND }, () => generateKey('secret', 'live')),
    testKeys: Array.from({ length: KEYS_PER_KIND }, () => generateKey('secret', 'test')),
    publicKeys: Array.from({ length: KEYS_PER_KIND }, () => generateKey('restricted', 'live'))
  }
  const secret = `whsec_${Buffer.alloc(32, 3).toString('base64')}`
  const file: TenantsFile = {
    tiers: { standard: { allowance: 10_000_000, window: '1d', sandboxAllowance: 10_000_000 } },
    tenants: [
      {
        id: 'calm',
        tier: 'standard',
        limits: { source: HUGE, backend: HUGE, key: HUGE, recipient: HUGE },
        keys: [{ id: 'calm_test', kind: 'secret', mode: 'test', sha256: hashKey(calmKey) }]
      },
      {
        id: 'noisy',
        tier: 'standard',
        templates: { en: { subject: costliestPart('subject'), text: costliestPart('text'), html: costliestPart('html') } },
        webhooks: hooks.map((url) => ({ url, secret, events: ['verification.failed'] })),
        keys: [
          ...noisy.secretKeys.map((key, index) => ({ id: `noisy_live_${index}`, kind: 'secret' as const, mode: 'live' as const, sha256: hashKey(key) })),
          ...noisy.testKeys.map((key, index) => ({ id: `noisy_test_${index}`, kind: 'secret' as const, mode: 'test' as const, sha256: hashKey(key) })),
          ...noisy.publicKeys.map((key, index) => ({ id: `noisy_page_${index}`, kind: 'restricted' as const, mode: 'live' as const, sha256: hashKey(key), origins: [new URL(ORIGIN).host] }))
        ]
      }
    ]
  }
  const tenantsFile = join(dir, 'tenants.json')
  writeFileSync(tenantsFile, JSON.stringify(file))
  const env = {
    ...BASE_ENV,
    TENANTS_FILE: tenantsFile,
    LOG_LEVEL: 'warn',
    OTP_HMAC_KEYS: `k1:${Buffer.alloc(32, 9).toString('base64')}`,
    // The calm tenant reads each code from its sandbox inbox, an account route limited per key.
    RATE_LIMIT_ACCOUNT: HUGE,
    // The calm tenant's flows come from one address at 200 a second.
    MAX_CONNECTIONS_PER_SOURCE: '0',
    WEBHOOK_ALLOW_HTTP_LOOPBACK: 'true',
    // Stopped at once: a drain would outlast the five seconds before SIGKILL, and a profile
    // is only written by a process that exits.
    SHUTDOWN_DRAIN_MS: '0',
    SHUTDOWN_GRACE_MS: '2000'
  }
  return { env, calmKey, noisy }
}

async function runStore (resources: Resources, store: string, hooks: string[], profileDir: string | null): Promise<StoreRun> {
  const dir = mkdtempSync(join(tmpdir(), `email-otp-noisy-${store}-`))
  resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })
  const setup = deployment(dir, hooks)
  let redisPid: number | null = null
  if (store === 'redis') {
    const redis = await startRedis()
    resources.add(redis.stop)
    setup.env.REDIS_URL = redis.url
    redisPid = Number(execFileSync('redis-cli', ['-p', String(redis.port), 'info', 'server'], { encoding: 'utf8' }).match(/process_id:(\d+)/)?.[1])
  }
  // One profile per thread (the event loop's and the preview thread's): Node's own names keep
  // the thread id apart (CPU.<date>.<time>.<pid>.<thread>.<n>.cpuprofile; thread 0 is the event
  // loop), which a name of our own would not. Each store's service has its own pid.
  const nodeArgs = profileDir === null ? [] : ['--cpu-prof', '--cpu-prof-dir', profileDir]
  const port = await freePort()
  // The log transport's output (every mail of the noisy tenant, its text part up to 64 KiB)
  // goes to /dev/null: on a file each is a synchronous write that stalls the event loop as
  // long as the disk takes, which a service sending through SES or SMTP never does.
  const service = await startNodeChild({
    name: `email-otp (${store})`,
    args: [...nodeArgs, 'dist/server.js'],
    cwd: ROOT,
    env: { ...setup.env, ...SERVICE_ENV, PORT: String(port) },
    port,
    stdout: 'ignore',
    readyPath: '/readyz',
    readyStatus: 200
  })
  resources.add(service.stop)
  const cpu = (): [number, number | null, number] => {
    const own = process.cpuUsage()
    return [cpuSeconds(service.pid) ?? Number.NaN, redisPid === null ? null : cpuSeconds(redisPid), (own.user + own.system) / 1e6]
  }

  process.stderr.write(`${store}: warm-up ${PHASES.warmup} s, baseline ${PHASES.baseline} s, flood ${FLOOD_LEAD_S} s ahead of the noisy phase, noisy ${PHASES.noisy} s\n`)
  // The flood's threads are loaded first and wait for 'go': starting them is not part of the flood.
  const floods = surfaces.map((surface) => startThread({
    role: 'flood',
    surface,
    port,
    sources: FLOOD_SOURCES,
    loops: LOOPS,
    secretKeys: setup.noisy.secretKeys,
    testKeys: setup.noisy.testKeys,
    publicKeys: setup.noisy.publicKeys,
    origin: ORIGIN,
    previewMinutes: ATTACK_MINUTES
  }))
  const floodResults = Promise.all(floods.map(async (thread) => await result<FloodResult>(thread, 'flood')))
  // Awaited once the calm tenant is done; a thread that fails before that ends the run there.
  floodResults.catch(() => {})
  // One calm tenant through every phase, on the same kept-alive connections: a partner's
  // backend does not reconnect because another tenant started a flood.
  const calm = startThread({
    role: 'calm',
    port,
    key: setup.calmKey,
    source: CALM_SOURCE,
    rate: RATE,
    phases: [
      { name: 'warmup', seconds: PHASES.warmup },
      { name: 'baseline', seconds: PHASES.baseline },
      { name: 'lead', seconds: FLOOD_LEAD_S },
      { name: 'noisy', seconds: PHASES.noisy }
    ],
    timeoutMs: CALM_TIMEOUT_MS
  })
  const at: Record<string, { time: number, cpu: [number, number | null, number] }> = {}
  let calmResults: Record<string, CalmResult> | null = null
  let baselineRss = Number.NaN
  // Buffered, so that two phases posted together (a lead of 0 s) are both seen.
  for await (const [message] of on(calm, 'message', { close: ['exit'] }) as AsyncIterable<[CalmMessage]>) {
    if ('results' in message) {
      calmResults = message.results
      break
    }
    at[message.phase] = { time: performance.now(), cpu: cpu() }
    if (message.phase === 'baseline') process.stderr.write(`${store}: baseline\n`)
    if (message.phase === 'lead') {
      baselineRss = peakRssMiB(service.pid)
      process.stderr.write(`${store}: flood (${surfaces.join(', ')}), then the calm tenant's noisy phase\n`)
      for (const thread of floods) thread.postMessage('go')
    }
  }
  const after = { time: performance.now(), cpu: cpu() }
  for (const thread of floods) thread.postMessage('stop')
  const results = await floodResults
  const [serviceFloodEnd] = cpu()
  const floodEnd = performance.now()
  const noisyRss = peakRssMiB(service.pid)
  await service.stop()
  const { baseline: baselineAt, lead: leadAt, noisy: noisyAt } = at
  if (calmResults === null) throw new Error('the calm tenant\'s worker exited without its results')
  if (baselineAt === undefined || leadAt === undefined || noisyAt === undefined || calmResults.baseline === undefined || calmResults.noisy === undefined) throw new Error('the calm tenant skipped a phase')
  const baseline = phase(calmResults.baseline)
  const noisy = phase(calmResults.noisy)
  const baselineSeconds = (leadAt.time - baselineAt.time) / 1000
  const noisySeconds = (after.time - noisyAt.time) / 1000
  const floodSeconds = (floodEnd - leadAt.time) / 1000
  const [serviceBefore, redisBefore, generatorBefore] = baselineAt.cpu
  const [serviceMiddle, redisMiddle, generatorMiddle] = leadAt.cpu
  const [serviceFloodStart] = leadAt.cpu
  const [serviceNoisyStart, redisNoisyStart, generatorNoisyStart] = noisyAt.cpu
  const [serviceAfter, redisAfter, generatorAfter] = after.cpu
  const floodSurfaces = results.map((result) => ({ ...result, rps: result.requests / result.seconds }))
  const floodRequests = results.reduce((sum, result) => sum + result.requests, 0)
  const baselineCpu = (serviceMiddle - serviceBefore) / baselineSeconds
  const floodCpu = serviceFloodEnd - serviceFloodStart - baselineCpu * floodSeconds
  const p99Ratio = noisy.p99 / baseline.p99
  const perSecond = (from: number | null, to: number | null, seconds: number): number | null => from === null || to === null ? null : (to - from) / seconds
  return {
    store,
    baseline,
    noisy,
    p99Ratio,
    flood: {
      requestsPerSecond: floodSurfaces.reduce((sum, result) => sum + result.rps, 0),
      admittedPerSecond: floodSurfaces.reduce((sum, result) => sum + Object.entries(result.statuses).reduce((served, [status, count]) => status.startsWith('2') ? served + count : served, 0) / result.seconds, 0),
      serviceCpuPerRequestUs: floodRequests > 0 ? floodCpu / floodRequests * 1e6 : Number.NaN,
      surfaces: floodSurfaces
    },
    cpu: {
      baseline: baselineCpu,
      noisy: (serviceAfter - serviceNoisyStart) / noisySeconds,
      redisBaseline: perSecond(redisBefore, redisMiddle, baselineSeconds),
      redisNoisy: perSecond(redisNoisyStart, redisAfter, noisySeconds),
      generatorBaseline: (generatorMiddle - generatorBefore) / baselineSeconds,
      generatorNoisy: (generatorAfter - generatorNoisyStart) / noisySeconds
    },
    peakRssMiB: { baseline: baselineRss, noisy: noisyRss },
    goal: { p99Within2x: p99Ratio <= 2, p99WithinTarget: p99Ratio <= P99_TARGET_RATIO, everyFlowSucceeded: baseline.succeeded === baseline.flows && noisy.succeeded === noisy.flows }
  }
}

const ms = (value: number): string => Number.isFinite(value) ? value.toFixed(1) : '-'
const pad = (value: string, width: number): string => value.padStart(width)

function table (runs: StoreRun[]): string {
  const lines = [
    `${'store'.padEnd(8)}${'phase'.padEnd(10)}${pad('flows', 7)}${pad('ok', 7)}${pad('flows/s', 9)}${pad('p50 ms', 9)}${pad('p99 ms', 9)}${pad('max ms', 9)}${pad('cpu', 6)}${pad('redis', 6)}${pad('load', 6)}${pad('flood/s', 9)}`
  ]
  for (const run of runs) {
    for (const [name, result, cpu, redis, generator, flood] of [
      ['baseline', run.baseline, run.cpu.baseline, run.cpu.redisBaseline, run.cpu.generatorBaseline, '-'],
      ['noisy', run.noisy, run.cpu.noisy, run.cpu.redisNoisy, run.cpu.generatorNoisy, run.flood.requestsPerSecond.toFixed(0)]
    ] as const) {
      lines.push(`${run.store.padEnd(8)}${name.padEnd(10)}${pad(String(result.flows), 7)}${pad(String(result.succeeded), 7)}${pad(result.flowsPerSecond.toFixed(1), 9)}${pad(ms(result.p50), 9)}${pad(ms(result.p99), 9)}${pad(ms(result.max), 9)}${pad(cpu.toFixed(2), 6)}${pad(redis === null ? '-' : redis.toFixed(2), 6)}${pad(generator.toFixed(2), 6)}${pad(flood, 9)}`)
    }
  }
  lines.push('')
  for (const run of runs) {
    lines.push(`${run.store}: calm p99 noisy/baseline ×${run.p99Ratio.toFixed(2)} (target ≤ ×${P99_TARGET_RATIO}: ${run.goal.p99WithinTarget ? 'PASS' : 'MISS'}; bound ≤ ×2: ${run.goal.p99Within2x ? 'PASS' : 'MISS'}); every calm flow succeeded: ${run.goal.everyFlowSucceeded ? 'PASS' : `MISS (${JSON.stringify({ ...run.baseline.problems, ...run.noisy.problems })})`}`)
    lines.push(`  flood served (2xx) ${run.flood.admittedPerSecond.toFixed(0)}/s of ${run.flood.requestsPerSecond.toFixed(0)}/s answered; service CPU per flood request: ${run.flood.serviceCpuPerRequestUs.toFixed(0)} µs; service peak RSS ${run.peakRssMiB.baseline.toFixed(0)} MiB after the baseline, ${run.peakRssMiB.noisy.toFixed(0)} MiB after the flood`)
    if (options['per-second'] === true) {
      for (const [name, result] of [['baseline', run.baseline], ['noisy', run.noisy]] as const) {
        lines.push(`  ${name} by second (p50/p99/max ms): ${result.perSecond.map((second) => `${second.second}: ${ms(second.p50)}/${ms(second.p99)}/${ms(second.max)}`).join(', ')}`)
      }
    }
    for (const surface of run.flood.surfaces) {
      const statuses = Object.entries(surface.statuses).map(([status, count]) => `${count} × ${status}`).join(', ')
      lines.push(`  flood ${surface.surface.padEnd(16)} ${pad(surface.rps.toFixed(0), 6)}/s  ${statuses}`)
    }
  }
  return lines.join('\n')
}

async function main (resources: Resources): Promise<void> {
  const loadBefore = loadavg()
  const hooks = surfaces.includes('webhooks') ? await hangingEndpoints(resources, HANGING_ENDPOINTS) : []
  const profileDir = options['cpu-prof'] === true ? join(ROOT, '.bench-build', 'noisy-profiles') : null
  if (profileDir !== null) mkdirSync(profileDir, { recursive: true })
  const runs: StoreRun[] = []
  for (const store of stores) runs.push(await runStore(resources, store, hooks, profileDir))
  const loadAfter = loadavg()
  const machine = `${cpus()[0]?.model ?? 'unknown'} × ${cpus().length}, node ${process.version}`
  process.stdout.write([
    `noisy neighbour${QUICK ? ' (quick)' : ''}: ${machine}; calm ${RATE} flows/s, flood ${LOOPS} in flight per surface (${surfaces.join(', ')})${Object.keys(SERVICE_ENV).length === 0 ? '' : `; service ${Object.entries(SERVICE_ENV).map(([name, value]) => `${name}=${value}`).join(' ')}`}`,
    `load average before ${loadBefore.map((value) => value.toFixed(2)).join(' ')}, after ${loadAfter.map((value) => value.toFixed(2)).join(' ')}`,
    '',
    table(runs),
    profileDir === null ? '' : `\nCPU profiles of the service: ${profileDir}`,
    ''
  ].join('\n'))
  writeFileSync(join(ROOT, 'bench', 'noisy-results.json'), JSON.stringify({
    date: new Date().toISOString(),
    machine,
    quick: QUICK,
    rate: RATE,
    loops: LOOPS,
    surfaces,
    phases: PHASES,
    loadAverage: { before: loadBefore, after: loadAfter },
    runs
  }, null, 2) + '\n')
}

const resources = new Resources()
resources.add(async () => { await Promise.all([...threads].map(async (thread) => await thread.terminate())) })
await runWithResources(main, 'bench', resources)
