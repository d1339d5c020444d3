/*
 * Where the Redis-backed service spends its CPU under load. Run after `npm run bench` (or
 * any build of dist/ and .bench-build/):
 *
 *   node .bench-build/bench/profile.js [--memory] [--transport ses|smtp] [--refusals] [--rate N]
 *
 * `--refusals` profiles the floods of refused dispatches that depend on the source, as
 * `npm run bench` measures them: 403 from a blocked source, then 429 from a source past its
 * limit, each analysed over its own window of one profile.
 *
 * `--transport` profiles a dispatch that leaves through SES (against `aws-ses-v2-local`) or
 * SMTP (nodemailer's pool against the bench's `smtp-server` sink) instead of the log.
 *
 * Starts a private redis-server and, once per endpoint, `node --cpu-prof dist/server.js`;
 * drives 50 connections of dispatch (fresh addresses) or verify (half right, half wrong
 * guesses) for 10 s, stops the service so that V8 writes the profile, and prints where the
 * CPU time went while the load ran, by package or file and by function. The verify pool is
 * minted in Redis by the benchmark's own OtpService with the service's HMAC key, so the
 * verify profile holds no dispatch traffic.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { freePort, startRedis } from '../test/support/redis.js'
import { Resources, startNodeChild, runWithResources } from './support/children.js'
import { CodeSeeder } from './support/seed.js'
import { runLoad, type LoadResult } from './support/load.js'
import { runLoadFrom } from './support/source-load.js'
import { runPacedLoad } from './support/paced-load.js'
import { BASE_ENV, NO_LIMIT, ROOT, benchTenant, benchTenantsDocument, dispatchRequest, nextAddress, startService, verifyRequests, type Token } from './support/service.js'

const CONNECTIONS = 50
/** `--memory`: the embedded default (in-process stores) instead of Redis. */
const IN_MEMORY = process.argv.includes('--memory')
/** `--transport ses|smtp`: dispatch through a real mail peer instead of the log. */
const TRANSPORT = ((): 'ses' | 'smtp' | null => {
  const index = process.argv.indexOf('--transport')
  if (index < 0) return null
  const value = process.argv[index + 1]
  if (value !== 'ses' && value !== 'smtp') throw new Error('--transport takes ses or smtp')
  return value
})()
const SECONDS = 10
/**
 * `--rate N`: dispatch paced at N requests a second (bench/support/paced-load.ts) instead of
 * 50 connections flat out: where the CPU goes when requests arrive on their own, as in the
 * benchmark's half-rate rows, rather than many to each wake-up.
 */
const RATE = ((): number | null => {
  const index = process.argv.indexOf('--rate')
  if (index < 0) return null
  const value = Number(process.argv[index + 1])
  if (!Number.isFinite(value) || value <= 0) throw new Error('--rate takes a number of requests a second')
  return value
})()
/** Verify warms up on this many codes; its rate sizes the measured pool to at least SECONDS. */
const WARMUP_CODES = 10_000
/** `--refusals`: the 403 and 429 floods instead of dispatch and verify. */
const REFUSALS = process.argv.includes('--refusals')
const BLOCKED_SOURCE = '127.0.0.2'
const LIMITED_SOURCE = '127.0.0.3'
/** Codes minted at once for the verify pool. */
const SEED_BATCH = 500
const TOP_AREAS = 15
const TOP_FUNCTIONS = 25

interface CallFrame { functionName: string, url: string, lineNumber: number }
interface ProfileNode { id: number, callFrame: CallFrame, children?: number[] }
interface CpuProfile {
  nodes: ProfileNode[]
  startTime: number
  samples: number[]
  timeDeltas: number[]
}

/** The package, or the file of email-otp, or the V8 pseudo-frame a sample landed in. */
function area ({ functionName, url }: CallFrame): string {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)'
  if (url.startsWith('node:')) return 'node core'
  const inModules = /\/node_modules\/((@[^/]+\/)?[^/]+)\//.exec(url)
  if (inModules !== null) return inModules[1] as string
  const inDist = url.indexOf('/dist/')
  return inDist >= 0 ? `email-otp ${url.slice(inDist + 6)}` : url
}

function where (frame: CallFrame): string {
  const shortUrl = frame.url.replace(/^file:\/\//, '').replace(ROOT, '').replace(/^.*\/node_modules\//, '')
  return `${frame.functionName || '(anonymous)'}  ${shortUrl === '' ? '' : `${shortUrl}:${frame.lineNumber + 1}`}`
}

const UNATTRIBUTED = new Set(['(native)', 'node core'])

/**
 * Self time per function, per area, and per area charged with the node core and native work
 * it called (a socket write counts for fastify or ioredis, whichever wrote), over the samples
 * taken between `from` and `to` (microseconds of the monotonic clock, which V8's profiler
 * timestamps also use).
 */
function analyse (profile: CpuProfile, from: number, to: number): string[] {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]))
  const parents = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id)
  const chargedArea = (nodeId: number): string => {
    const own = area((nodes.get(nodeId) as ProfileNode).callFrame)
    for (let id: number | undefined = nodeId; id !== undefined; id = parents.get(id)) {
      const frame = nodes.get(id)?.callFrame
      if (frame !== undefined && frame.url !== '' && !UNATTRIBUTED.has(area(frame))) return area(frame)
    }
    return own
  }
  const byFunction = new Map<string, number>()
  const byArea = new Map<string, number>()
  const byCharge = new Map<string, number>()
  const add = (map: Map<string, number>, name: string, micros: number): void => { map.set(name, (map.get(name) ?? 0) + micros) }
  let at = profile.startTime
  let total = 0
  let idle = 0
  for (const [index, nodeId] of profile.samples.entries()) {
    const delta = profile.timeDeltas[index] ?? 0
    at += delta
    const frame = nodes.get(nodeId)?.callFrame
    if (at < from || at > to || frame === undefined) continue
    if (frame.functionName === '(idle)') {
      idle += delta
      continue
    }
    total += delta
    add(byFunction, where(frame), delta)
    add(byArea, area(frame), delta)
    add(byCharge, chargedArea(nodeId), delta)
  }
  if (total === 0) throw new Error('no profile samples fell within the load window')
  const share = (micros: number): string => `${(100 * micros / total).toFixed(1).padStart(5)}%`
  const top = (map: Map<string, number>, count: number): string[] => [...map].sort((a, b) => b[1] - a[1]).slice(0, count).map(([name, micros]) => `  ${share(micros)}  ${name}`)
  return [
    `  busy ${(total / 1e6).toFixed(1)} s of ${((total + idle) / 1e6).toFixed(1)} s sampled (idle ${(100 * idle / (total + idle)).toFixed(0)}%); shares are of busy time`,
    '', '  self time by package / file', ...top(byArea, TOP_AREAS),
    '', '  by package / file, node core and native work charged to the caller', ...top(byCharge, TOP_AREAS),
    '', '  self time by function', ...top(byFunction, TOP_FUNCTIONS)
  ]
}

const monotonicMicros = (): number => Number(process.hrtime.bigint() / 1000n)

/** One service, two floods from loopback sources, one profile analysed per flood. */
async function profileRefusals (resources: Resources, dir: string, tenant: ReturnType<typeof benchTenant>, redisUrl: string): Promise<void> {
  const tenantsFile = join(dir, 'tenants-refusals.json')
  writeFileSync(tenantsFile, JSON.stringify(benchTenantsDocument(tenant.liveKey, { recipient: NO_LIMIT, source: '100/1h', key: NO_LIMIT })))
  const blockList = join(dir, 'blocked.txt')
  writeFileSync(blockList, `${BLOCKED_SOURCE}/32\n`)
  const profileDir = join(dir, 'refusals')
  const service = await startService(resources, {
    name: 'email-otp (Redis, refusals)',
    dir,
    env: { ...tenant.env, REDIS_URL: redisUrl, TENANTS_FILE: tenantsFile, IP_BLOCKLISTS: blockList, SHUTDOWN_DRAIN_MS: '0' },
    nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profileDir]
  })
  const headers = { authorization: `Bearer ${tenant.liveKey}` }
  const windows: Array<{ name: string, result: LoadResult, from: number, to: number }> = []
  for (const [name, localAddress, expected] of [['403 blocked source', BLOCKED_SOURCE, 403], ['429 over the per-source limit', LIMITED_SOURCE, 429]] as const) {
    const flood = async (seconds: number): Promise<LoadResult> => await runLoadFrom({
      url: service.child.url, path: '/otp/request', headers, connections: CONNECTIONS, seconds, localAddress, next: () => ({ body: JSON.stringify({ email: nextAddress() }), expected })
    })
    await flood(2)
    const from = monotonicMicros()
    const result = await flood(SECONDS)
    windows.push({ name, result, from, to: monotonicMicros() })
  }
  await service.child.stop()
  const [file] = readdirSync(profileDir).filter((name) => name.endsWith('.cpuprofile'))
  if (file === undefined) throw new Error(`${service.child.name} wrote no profile`)
  const profile = JSON.parse(readFileSync(join(profileDir, file), 'utf8')) as CpuProfile
  for (const { name, result, from, to } of windows) {
    process.stdout.write([
      '',
      `${name}: ${Math.round(result.rps).toLocaleString('en')} req/s, p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms at ${CONNECTIONS} connections (statuses ${JSON.stringify(result.statuses)})`,
      ...analyse(profile, from, to)
    ].join('\n') + '\n')
  }
}

/** The SES emulator or the SMTP sink, started as `npm run bench` starts them; the service's mail settings. */
async function startMailPeer (resources: Resources, transport: 'ses' | 'smtp'): Promise<Record<string, string>> {
  const port = await freePort()
  const mailFrom = { MAIL_FROM: 'Bench <no-reply@bench.example>' }
  if (transport === 'ses') {
    const ses = await startNodeChild({
      name: 'SES emulator', args: [join(ROOT, 'node_modules', 'aws-ses-v2-local', 'dist', 'cli.js'), '--host', '127.0.0.1', '--port', String(port)], cwd: ROOT, env: BASE_ENV, port, stdout: 'ignore', readyPath: '/health-check'
    })
    resources.add(ses.stop)
    return { ...mailFrom, MAIL_TRANSPORT: 'ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses.url, AWS_ACCESS_KEY_ID: 'bench', AWS_SECRET_ACCESS_KEY: 'bench' }
  }
  const smtp = await startNodeChild({ name: 'SMTP sink', args: [fileURLToPath(new URL('./smtp-sink.js', import.meta.url))], cwd: ROOT, env: { ...BASE_ENV, PORT: String(port) }, port, stdout: 'ignore', readyPath: null })
  resources.add(smtp.stop)
  return { ...mailFrom, MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${port}?tls=off` }
}

async function main (resources: Resources): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-profile-'))
  resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })
  const redis = await startRedis()
  resources.add(redis.stop)
  const client = new Redis(redis.url)
  resources.add(async () => { client.disconnect() })
  const tenant = benchTenant(dir)
  const headers = { authorization: `Bearer ${tenant.liveKey}` }
  const mailEnv = TRANSPORT === null ? {} : await startMailPeer(resources, TRANSPORT)
  if (REFUSALS) {
    await profileRefusals(resources, dir, tenant, redis.url)
    return
  }

  // The memory store's verify pool could only come from its mail log: dispatch alone there,
  // as with a mail peer, whose cost is the dispatch's.
  for (const endpoint of IN_MEMORY || TRANSPORT !== null || RATE !== null ? ['dispatch'] as const : ['dispatch', 'verify'] as const) {
    const profileDir = join(dir, endpoint)
    const service = await startService(resources, {
      name: `email-otp (${IN_MEMORY ? 'memory' : 'Redis'}, ${endpoint})`,
      dir,
      // No drain: the profile is written when the process exits, before the stop gives up on it.
      env: { ...tenant.env, ...mailEnv, SHUTDOWN_DRAIN_MS: '0', ...(IN_MEMORY ? {} : { REDIS_URL: redis.url }) },
      nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profileDir]
    })
    let result: LoadResult
    let from: number
    if (endpoint === 'dispatch') {
      // The first seconds compile and optimise: not what the service spends at speed.
      await runLoad({ url: service.child.url, path: '/otp/request', headers, connections: CONNECTIONS, seconds: 2, next: dispatchRequest })
      from = monotonicMicros()
      result = RATE === null
        ? await runLoad({ url: service.child.url, path: '/otp/request', headers, connections: CONNECTIONS, seconds: SECONDS, next: dispatchRequest })
        : await runPacedLoad({ url: service.child.url, path: '/otp/request', headers, connections: CONNECTIONS, rate: RATE, seconds: SECONDS, next: dispatchRequest })
    } else {
      const seeder = await CodeSeeder.open(tenant.liveKey, tenant.hmacSecret, { redis: client })
      resources.add(async () => { await seeder.close() })
      // In batches: each admission script carries a deadline (lib/redis/fence.ts), and ten
      // thousand at once queue in Redis past it.
      const seed = async (count: number): Promise<Token[]> => {
        const tokens: Token[] = []
        for (let start = 0; start < count; start += SEED_BATCH) {
          tokens.push(...await Promise.all(Array.from({ length: Math.min(SEED_BATCH, count - start) }, async () => await seeder.mint(nextAddress()))))
        }
        return tokens
      }
      const verify = async (tokens: Token[]): Promise<LoadResult> => await runLoad({
        url: service.child.url, path: '/otp/verify', headers, connections: CONNECTIONS, amount: tokens.length, next: verifyRequests(tokens)
      })
      const warm = await verify(await seed(WARMUP_CODES))
      // Half as much again: the warm-up still compiles, so the measured run goes faster.
      const pool = await seed(Math.ceil(warm.rps * SECONDS * 1.5))
      from = monotonicMicros()
      result = await verify(pool)
    }
    const to = monotonicMicros()
    await service.child.stop()
    const [file] = readdirSync(profileDir).filter((name) => name.endsWith('.cpuprofile'))
    if (file === undefined) throw new Error(`${service.child.name} wrote no profile`)
    const profile = JSON.parse(readFileSync(join(profileDir, file), 'utf8')) as CpuProfile
    process.stdout.write([
      '',
      `${endpoint}: ${Math.round(result.rps).toLocaleString('en')} req/s, p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms ${RATE === null ? `at ${CONNECTIONS} connections` : `paced at ${RATE} req/s`} (statuses ${JSON.stringify(result.statuses)})`,
      ...analyse(profile, from, to)
    ].join('\n') + '\n')
  }
}

await runWithResources(main, 'profile')
