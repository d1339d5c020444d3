/*
 * Throughput and latency of email-otp against a bare Fastify route (the ceiling) and a
 * hand-rolled Express peer, then a concurrency curve and a keyspace-size curve on Redis.
 * `npm run bench`; see bench/README.md. Every process it needs is its own: a private
 * redis-server, the service twice (Redis and in-memory stores), the bare route and the peer,
 * each on a free loopback port, all stopped at the end, on error and on Ctrl-C.
 */
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { cpus, release, tmpdir, totalmem, type } from 'node:os'
import { join } from 'node:path'
import { createSecretKey, randomBytes, randomInt } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { generateKey, hashKey } from '../lib/keys/api-keys.js'
import { freePort, startRedis } from '../test/support/redis.js'
import { peerCodeDigest, peerTokenKey } from './peers/express-otp.js'
import { Resources, cpuSeconds, startNodeChild, type NodeChild, runWithResources } from './support/children.js'
import { runLoad, type LoadResult, type NextRequest } from './support/load.js'
import { BASE_ENV, ROOT, benchTenant, benchTenantsDocument, dispatchRequest, nextAddress, NO_LIMIT, startService, verifyRequests, type Guesses, type Service, type Token, type VerifyBody } from './support/service.js'
import { runPacedLoad } from './support/paced-load.js'
import { sesRoundTrip, smtpRoundTrip } from './support/provider-round-trip.js'
import { runLoadFrom } from './support/source-load.js'
import { loadTokens } from './support/tokens.js'

const MAIN_CONNECTIONS = 50
const MAIN_SECONDS = 5
const WARMUP_SECONDS = 2
const CURVE_CONNECTIONS = [1, 10, 50, 200]
const CURVE_SECONDS = 3
const CURVE_WARMUP_SECONDS = 1
const PRELOADS = [0, 100_000, 1_000_000]
/** `--quick`: the seven main runs only, to compare one change against the last in about 90 s. */
const QUICK = process.argv.includes('--quick')
/**
 * `--templates`: also the in-memory service with a tenant whose message is its own Liquid
 * templates (bench/support/service.ts, withTemplates), measured right after the one with the
 * built-in wording, so the two compare within one run.
 */
const TEMPLATES = process.argv.includes('--templates')
/**
 * `--transports`: the bare route and the dispatch through each mail transport (log, SES, SMTP)
 * only, with their real-path ratios and targets: about a minute, for work on a transport.
 */
const TRANSPORTS = process.argv.includes('--transports')
/** With --transports, the three paths are measured again at this share of the slowest one's rate. */
const FIXED_RATE_SHARE = 0.8
/**
 * Verify pools are sized from the rate of the warm-up just before, with this to spare: a
 * run right after a batch of dispatches often goes faster than its warm-up did, and every
 * run must last its full time.
 */
const POOL_MARGIN = 1.5
const PEER_CODE_TTL_SECONDS = 600
/** Loopback sources of the refusal floods: one on the refusal service's block list, one over its per-source limit. */
const BLOCKED_SOURCE = '127.0.0.2'
const LIMITED_SOURCE = '127.0.0.3'
const REFUSAL_SOURCE_LIMIT = 100

/** One measured run of a group, before its ratios are known. */
interface GroupRun {
  name: string
  result: Measured
  refusal?: number
}
const PEER_HMAC_SECRET = randomBytes(32).toString('base64')
const PEER_HMAC_KEY = createSecretKey(Buffer.from(PEER_HMAC_SECRET, 'base64'))

/** Node 24, 50 connections: throughput against the Express peer, the service's own CPU against the bare route's, p99. */
const TARGETS = {
  vsExpress: 1.5,
  vsBetterAuth: 4,
  cpuVsBare: { dispatch: 4, verify: 3 },
  p99Ms: 10,
  /** Real transports against local peers: service CPU against the log dispatch's, and p99. */
  vsLog: { ses: 1.5, smtp: 3 },
  realP99Ms: 25,
  /**
   * Each dispatch path at half the rate it sustained (at saturation p99 is only connections ÷
   * throughput): the log path's p99, and how far SES's and SMTP's may be above the provider's own.
   */
  halfRateP99Ms: { log: 10, aboveProvider: 25 },
  /** Refusal floods: service CPU against the bare route's (401, 403 and 429 alike), p99 of 400 and 413. */
  refusalVsBare: 1.5,
  refusalP99Ms: 20,
  /** Verify with the right code (a receipt signed) against a wrong code, service CPU. */
  rightVsWrong: 1.3
}

interface Target {
  name: string
  url: string
  headers: Record<string, string>
  /** Dispatch's path and body, when not email-otp's. */
  dispatch?: { path: string, body: (email: string) => string }
  /** The target's process, whose CPU time is read around every measured run. */
  pid: number
  /** Whether the target works on the shared redis-server, whose CPU time then counts too. */
  onRedis: boolean
}

/** A target with OTP endpoints, and how to obtain real, unused codes for its verify. */
interface OtpTarget extends Target {
  issue: (count: number) => Promise<Token[]>
  /** Verify's path and body, when not email-otp's. */
  verify?: { path: string, body: VerifyBody }
  /**
   * Fixed verify pools (warm-up, measured) instead of pools sized from a calibration run: for
   * a peer whose verify slows down as its store fills, so that its runs end in bounded time.
   */
  verifyPools?: { warmup: number, measured: number }
}

interface Measured extends LoadResult {
  /** CPU microseconds per answer spent by the target's process; null where /proc is missing. */
  cpuMicros: number | null
  /** The same for redis-server, for targets on Redis. */
  redisCpuMicros: number | null
}

/** What a run is compared with: the bare route's throughput and CPU per answer. */
interface Reference {
  rps: number
  cpuMicros: number | null
}

interface Row {
  group: 'main' | 'connections' | 'preloaded'
  /** For a refusal flood: the status every answer should have (a 429 is then no failure). */
  refusal?: number
  target: string
  connections: number
  /** Keys in Redis when the run started (preloaded group only). */
  keys?: number
  result: Measured
  /** The bare-route figures this run's ratios use (see bareReference). */
  reference: Reference
}

/**
 * The mean of bare-route runs. The machine's speed drifts during a run (a shared VM: the
 * bare route has measured 9,500 and 20,000 req/s minutes apart), so each target is compared
 * with the bare runs just before and just after it, not with one taken minutes earlier.
 */
function bareReference (runs: readonly Measured[]): Reference {
  const cpu = runs.map(totalCpu)
  return {
    rps: runs.reduce((sum, run) => sum + run.rps, 0) / runs.length,
    cpuMicros: cpu.includes(null) ? null : (cpu as number[]).reduce((sum, micros) => sum + micros, 0) / cpu.length
  }
}

/** Runs `run` and adds the CPU time the target (and Redis) spent on it, per answer. */
type Meter = (target: Target, run: () => Promise<LoadResult>) => Promise<Measured>

function cpuMeter (client: Redis): Meter {
  const redisCpu = async (): Promise<number> => {
    const info = await client.info('cpu')
    return Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1])
  }
  return async (target, run) => {
    const processBefore = cpuSeconds(target.pid)
    const redisBefore = target.onRedis ? await redisCpu() : null
    const result = await run()
    const processAfter = cpuSeconds(target.pid)
    const redisAfter = target.onRedis ? await redisCpu() : null
    const perAnswer = (before: number | null, after: number | null): number | null =>
      before === null || after === null || result.requests === 0 ? null : (after - before) * 1e6 / result.requests
    return { ...result, cpuMicros: perAnswer(processBefore, processAfter), redisCpuMicros: perAnswer(redisBefore, redisAfter) }
  }
}

/** Preparation runs must be clean; a measured run is reported whatever it met. */
function assertClean (result: LoadResult, what: string): void {
  if (result.unexpected > 0 || result.errors > 0) {
    throw new Error(`${what}: ${result.unexpected} unexpected answers and ${result.errors} errors (statuses ${JSON.stringify(result.statuses)})`)
  }
}

async function measureDispatch (meter: Meter, target: Target, connections: number, seconds: number, warmup: number, rate?: number): Promise<Measured> {
  const format = target.dispatch
  const next = format === undefined ? dispatchRequest : () => ({ body: format.body(nextAddress()), expected: 200 })
  const spec = { url: target.url, path: format?.path ?? '/otp/request', headers: target.headers, connections, next, ...(rate === undefined ? {} : { rate }) }
  await runLoad({ ...spec, seconds: warmup })
  return await meter(target, async () => await runLoad({ ...spec, seconds }))
}

/** Dispatch at a steady `rate` (support/paced-load.ts), after a warm-up at the same rate. */
async function measurePacedDispatch (meter: Meter, target: Target, rate: number): Promise<Measured> {
  const spec = { url: target.url, path: '/otp/request', headers: target.headers, connections: MAIN_CONNECTIONS, rate, next: dispatchRequest }
  await runPacedLoad({ ...spec, seconds: WARMUP_SECONDS })
  return await meter(target, async () => await runPacedLoad({ ...spec, seconds: MAIN_SECONDS }))
}

/**
 * Verify needs one unused code per request, so its runs are sized by request count: a short
 * calibration run gives a first rate, a warm-up of `warmup` seconds a better one, and the
 * measured pool holds rate × seconds × POOL_MARGIN codes.
 */
async function measureVerify (meter: Meter, target: OtpTarget, connections: number, seconds: number, warmup: number, guesses: Guesses = 'mixed'): Promise<Measured> {
  const verify = async (tokens: Token[]): Promise<LoadResult> => await runLoad({
    url: target.url, path: target.verify?.path ?? '/otp/verify', headers: target.headers, connections, amount: tokens.length, next: verifyRequests(tokens, guesses, target.verify?.body)
  })
  // autocannon refuses a run of fewer requests than connections.
  const pool = async (count: number): Promise<Token[]> => await target.issue(Math.max(2 * connections, Math.ceil(count)))
  if (target.verifyPools !== undefined) {
    await verify(await pool(target.verifyPools.warmup))
    const measuredPool = await pool(target.verifyPools.measured)
    return await meter(target, async () => await verify(measuredPool))
  }
  const calibration = await verify(await pool(Math.max(1000, 20 * connections)))
  // A peer that times out under load (better-auth's memory adapter copies its store on every
  // sign-in) still gets its runs; their errors are reported with the figures.
  if (calibration.unexpected > 0 || calibration.requests === 0) assertClean(calibration, `${target.name}: verify calibration`)
  const warm = await verify(await pool(calibration.rps * warmup))
  const measuredPool = await pool(warm.rps * seconds * POOL_MARGIN)
  return await meter(target, async () => await verify(measuredPool))
}

/**
 * A flood of requests that must all be refused with `expected`, measured like a dispatch
 * run; from `localAddress` when the refusal depends on the source.
 */
async function measureRefusal (meter: Meter, target: Target, flood: { expected: number, headers?: Record<string, string>, body: () => string, localAddress?: string }): Promise<Measured> {
  const headers = { ...target.headers, ...flood.headers }
  const next = (): NextRequest => ({ body: flood.body(), expected: flood.expected })
  const run = async (seconds: number): Promise<LoadResult> => flood.localAddress === undefined
    ? await runLoad({ url: target.url, path: '/otp/request', headers, connections: MAIN_CONNECTIONS, seconds, next })
    : await runLoadFrom({ url: target.url, path: '/otp/request', headers, connections: MAIN_CONNECTIONS, seconds, localAddress: flood.localAddress, next })
  await run(WARMUP_SECONDS)
  return await meter(target, async () => await run(MAIN_SECONDS))
}

interface DispatchAnswer { data: { requestId: string } }

const MAIL_HEADER = '----- email-otp log mailer'

/**
 * Codes for verify, the way a developer reads them with the log mailer: dispatch with the
 * live key to fresh addresses, then pair each address's requestId (from the answer) with the
 * code printed in its message. The service's stdout is a file opened for appending, emptied
 * before each batch.
 */
function codesFromMailLog (service: Service, liveKey: string): (count: number) => Promise<Token[]> {
  return async (count) => {
    truncateSync(service.mailLog, 0)
    const requestIds = new Map<string, string>()
    const result = await runLoad({
      url: service.child.url,
      path: '/otp/request',
      headers: { authorization: `Bearer ${liveKey}` },
      connections: MAIN_CONNECTIONS,
      amount: count,
      next: () => {
        const email = nextAddress()
        return { body: JSON.stringify({ email }), expected: 200, tag: email }
      },
      onResponse: (status, body, email) => {
        if (status === 200 && email !== undefined) requestIds.set(email, (JSON.parse(body) as DispatchAnswer).data.requestId)
      }
    })
    // On a machine shared with other work a few dispatches may time out on Redis (503): their
    // addresses have no requestId and are left out; more than a few is a failure.
    if (result.errors > 0 || result.unexpected > count / 100) assertClean(result, `${service.child.name}: issuing ${count} codes`)
    const tokens: Token[] = []
    for (const message of readFileSync(service.mailLog, 'utf8').split(MAIL_HEADER)) {
      const to = /^To: (\S+)$/m.exec(message)?.[1]
      // The code is the only 6-digit number of the body, which follows the first blank line.
      const code = /\n\n[\s\S]*?\b(\d{6})\b/.exec(message)?.[1]
      const requestId = to === undefined ? undefined : requestIds.get(to)
      if (requestId !== undefined && code !== undefined) tokens.push({ requestId, code })
    }
    if (tokens.length !== requestIds.size) throw new Error(`${service.child.name}: found ${tokens.length} of ${requestIds.size} codes in the mail log`)
    return tokens
  }
}

/**
 * Codes for the better-auth peer's verify: dispatched to fresh addresses, each code read from
 * the line "address code" its sendVerificationOTP wrote to stdout; the address is the token's
 * requestId (better-auth's sign-in takes the address and the code).
 */
function codesFromPeerLog (child: NodeChild, log: string, dispatch: NonNullable<Target['dispatch']>): (count: number) => Promise<Token[]> {
  return async (count) => {
    truncateSync(log, 0)
    const sent = new Set<string>()
    const result = await runLoad({
      url: child.url,
      path: dispatch.path,
      headers: {},
      connections: MAIN_CONNECTIONS,
      amount: count,
      next: () => {
        const email = nextAddress()
        sent.add(email)
        return { body: dispatch.body(email), expected: 200 }
      }
    })
    assertClean(result, `${child.name}: issuing ${count} codes`)
    // Requests still in flight when an earlier timed run stopped may write after the truncation.
    const tokens = readFileSync(log, 'utf8').split('\n').map((line) => {
      const [requestId = '', code = ''] = line.split(' ')
      return { requestId, code }
    }).filter(({ requestId }) => sent.has(requestId))
    if (tokens.length !== count) throw new Error(`${child.name}: found ${tokens.length} of ${count} codes in its output`)
    return tokens
  }
}

/**
 * The peer mails codes into a sink, so its verify pool is written straight into its Redis
 * keys, in its own format: what its dispatch would have stored.
 */
function seededPeerCodes (client: Redis): (count: number) => Promise<Token[]> {
  return async (count) => {
    const tokens: Token[] = []
    const pipeline = client.pipeline()
    for (let i = 0; i < count; i++) {
      const token = { requestId: 'otp_' + randomBytes(18).toString('base64url'), code: randomInt(0, 1_000_000).toString().padStart(6, '0') }
      pipeline.set(peerTokenKey(token.requestId), peerCodeDigest(PEER_HMAC_KEY, token.requestId, token.code), 'EX', PEER_CODE_TTL_SECONDS)
      tokens.push(token)
    }
    await pipeline.exec()
    return tokens
  }
}

/** Warn when other work takes more than this share of the machine's CPU before or after the run. */
const BUSY_MACHINE = 0.2

/**
 * Share of the machine's CPU time (all cores) spent busy during one second, from /proc/stat;
 * null where /proc is missing. Taken while the benchmark's own processes are idle, it is
 * what other work takes from the targets and the load generator.
 */
async function machineBusy (): Promise<number | null> {
  const sample = (): number[] | null => {
    try {
      // "cpu  user nice system idle iowait irq softirq steal …", in clock ticks.
      return readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]?.trim().split(/\s+/).slice(1, 9).map(Number) ?? null
    } catch {
      return null
    }
  }
  const before = sample()
  await sleep(1000)
  const after = sample()
  if (before === null || after === null) return null
  const delta = after.map((value, index) => value - (before[index] ?? 0))
  const total = delta.reduce((sum, value) => sum + value, 0)
  const idle = (delta[3] ?? 0) + (delta[4] ?? 0)
  return total > 0 ? 1 - idle / total : null
}

const number = (value: number, digits = 0): string => value.toLocaleString('en', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const micros = (value: number | null): string => value === null ? '-' : number(value)
/** CPU per answer of the target and of Redis together. */
const totalCpu = (result: Measured): number | null => result.cpuMicros === null ? null : result.cpuMicros + (result.redisCpuMicros ?? 0)

function label (row: Row): string {
  if (row.group === 'connections') return `${row.target} c=${row.connections}`
  if (row.group === 'preloaded') return `${row.target}, ${number(row.keys ?? 0)} keys`
  return row.target
}

function non2xx (result: LoadResult): number {
  return Object.entries(result.statuses).reduce((sum, [status, count]) => status.startsWith('2') ? sum : sum + count, 0)
}

/** 5xx and 429 mean the service failed or refused: the figures do not measure its work. */
function problems (row: Row): string[] {
  const found: string[] = []
  const failed = Object.entries(row.result.statuses).filter(([status]) => Number(status) >= 500 || (status === '429' && row.refusal !== 429))
  if (failed.length > 0) found.push(`INVALID run: ${label(row)}: ${failed.map(([status, count]) => `${count} × ${status}`).join(', ')}`)
  if (row.result.unexpected > 0) found.push(`${label(row)}: ${row.result.unexpected} answers with an unexpected status ${JSON.stringify(row.result.statuses)}`)
  if (row.result.errors > 0) found.push(`${label(row)}: ${row.result.errors} connection errors or timeouts`)
  return found
}

function table (rows: readonly Row[]): string[] {
  const header = ['target', 'conns', 'keys', 'req/s', 'p50 ms', 'p99 ms', '× bare', 'cpu µs', 'redis µs', 'cpu × bare', 'non-2xx', 'unexpected', 'secs']
  const cells = rows.map(({ connections, keys, result, target, reference }) => {
    const cpu = totalCpu(result)
    return [
      target,
      String(connections),
      keys === undefined ? '' : number(keys),
      number(result.rps),
      number(result.p50, 2),
      number(result.p99, 2),
      (result.rps / reference.rps).toFixed(2),
      micros(result.cpuMicros),
      micros(result.redisCpuMicros),
      cpu === null || reference.cpuMicros === null ? '-' : (reference.cpuMicros / cpu).toFixed(2),
      number(non2xx(result)),
      number(result.unexpected + result.errors),
      result.seconds.toFixed(1)
    ]
  })
  const widths = header.map((title, column) => Math.max(title.length, ...cells.map((line) => (line[column] ?? '').length)))
  const format = (line: string[]): string => line.map((cell, column) => column === 0 ? cell.padEnd(widths[column] ?? 0) : cell.padStart(widths[column] ?? 0)).join('  ')
  const lines = [format(header), widths.map((width) => '-'.repeat(width)).join('  ')]
  for (const [index, line] of cells.entries()) {
    // A blank line between the three groups.
    if (index > 0 && rows[index]?.group !== rows[index - 1]?.group) lines.push('')
    lines.push(format(line))
  }
  return lines
}

async function main (resources: Resources): Promise<void> {
  const started = Date.now()
  const busyAtStart = await machineBusy()
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-bench-'))
  resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })

  const redis = await startRedis()
  resources.add(redis.stop)
  const client = new Redis(redis.url)
  resources.add(async () => { client.disconnect() })
  const meter = cpuMeter(client)

  const tenant = benchTenant(dir)
  const peerKey = generateKey('secret', 'live')
  async function startScript (name: string, script: string, env: Record<string, string>): Promise<NodeChild> {
    const port = await freePort()
    const child = await startNodeChild({
      name, args: [fileURLToPath(new URL(script, import.meta.url))], cwd: ROOT, env: { ...BASE_ENV, ...env, PORT: String(port) }, port, stdout: 'ignore', readyPath: '/'
    })
    resources.add(child.stop)
    return child
  }

  process.stderr.write(TRANSPORTS
    ? 'starting redis-server, the SES emulator, an SMTP sink, email-otp (Redis: log, SES, SMTP), bare route\n'
    : `starting redis-server, the SES emulator, an SMTP sink, email-otp (Redis: log, SES, SMTP, refusals), email-otp (memory)${TEMPLATES ? ', email-otp (memory, templates)' : ''}, bare route, Express peer, better-auth (memory, Redis)\n`)
  const sesPort = await freePort()
  const ses = await startNodeChild({
    name: 'SES emulator', args: [join(ROOT, 'node_modules', 'aws-ses-v2-local', 'dist', 'cli.js'), '--host', '127.0.0.1', '--port', String(sesPort)], cwd: ROOT, env: BASE_ENV, port: sesPort, stdout: 'ignore', readyPath: '/health-check'
  })
  resources.add(ses.stop)
  const smtpPort = await freePort()
  const smtp = await startNodeChild({ name: 'SMTP sink', args: [fileURLToPath(new URL('./smtp-sink.js', import.meta.url))], cwd: ROOT, env: { ...BASE_ENV, PORT: String(smtpPort) }, port: smtpPort, stdout: 'ignore', readyPath: null })
  resources.add(smtp.stop)
  const mailFrom = { MAIL_FROM: 'Bench <no-reply@bench.example>' }
  const sesEnv = { ...mailFrom, MAIL_TRANSPORT: 'ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses.url, AWS_ACCESS_KEY_ID: 'bench', AWS_SECRET_ACCESS_KEY: 'bench' }
  const smtpEnv = { ...mailFrom, MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${smtpPort}?tls=off` }
  // The service of the per-source floods: 127.0.0.2 on its block list, a per-source limit the
  // first second of a flood from 127.0.0.3 exhausts; everything else as the others. The other
  // floods go to the Redis service, whose limits never bind (an authenticated caller's
  // malformed or oversized request counts against its limits).
  const refusalTenants = join(dir, 'tenants-refusals.json')
  writeFileSync(refusalTenants, JSON.stringify(benchTenantsDocument(tenant.liveKey, { recipient: NO_LIMIT, source: `${REFUSAL_SOURCE_LIMIT}/1h`, key: NO_LIMIT })))
  const blockList = join(dir, 'blocked.txt')
  writeFileSync(blockList, `${BLOCKED_SOURCE}/32\n`)

  const withRedis = await startService(resources, { name: 'email-otp (Redis)', dir, env: { ...tenant.env, REDIS_URL: redis.url } })
  const withSes = await startService(resources, { name: 'email-otp (Redis, SES)', dir, env: { ...tenant.env, ...sesEnv, REDIS_URL: redis.url } })
  const withSmtp = await startService(resources, { name: 'email-otp (Redis, SMTP)', dir, env: { ...tenant.env, ...smtpEnv, REDIS_URL: redis.url } })
  const bareChild = await startScript('bare route', './bare.js', {})
  const otpTarget = (name: string, service: Service, onRedis: boolean): OtpTarget => ({
    name, url: service.child.url, headers: { authorization: `Bearer ${tenant.liveKey}` }, pid: service.child.pid, onRedis, issue: codesFromMailLog(service, tenant.liveKey)
  })
  const bareTarget: Target = { name: 'bare route', url: bareChild.url, headers: {}, pid: bareChild.pid, onRedis: false }
  const redisTarget = otpTarget('email-otp (Redis)', withRedis, true)
  const sesTarget = otpTarget('email-otp (Redis, SES)', withSes, true)
  const smtpTarget = otpTarget('email-otp (Redis, SMTP)', withSmtp, true)
  const transportGroup = async (): Promise<GroupRun[]> => [
    ...await dispatchOnly(redisTarget),
    ...await dispatchOnly(sesTarget),
    ...await dispatchOnly(smtpTarget)
  ]
  const dispatchOnly = async (target: Target): Promise<GroupRun[]> => [
    { name: `${target.name} dispatch`, result: await measureDispatch(meter, target, MAIN_CONNECTIONS, MAIN_SECONDS, WARMUP_SECONDS) }
  ]

  /** The other groups: verify, the refusal floods, the in-memory service and the peers. */
  const comparisons = async (): Promise<{ groups: Array<() => Promise<GroupRun[]>>, peerGroups: number }> => {
    const refusing = await startService(resources, { name: 'email-otp (Redis, refusals)', dir, env: { ...tenant.env, REDIS_URL: redis.url, TENANTS_FILE: refusalTenants, IP_BLOCKLISTS: blockList } })
    const inMemory = await startService(resources, { name: 'email-otp (memory)', dir, env: tenant.env })
    const withTemplates = TEMPLATES ? await startService(resources, { name: 'email-otp (memory, templates)', dir, env: { ...tenant.env, TENANTS_FILE: tenant.templatesFile } }) : null
    const peer = await startScript('Express peer', './peers/express-otp.js', { REDIS_URL: redis.url, PEER_KEY_SHA256: hashKey(peerKey), PEER_HMAC_SECRET })
    const betterAuthTargets: OtpTarget[] = []
    for (const storage of ['memory', 'redis'] as const) {
      const name = `better-auth (${storage === 'redis' ? 'Redis' : 'memory'})`
      const port = await freePort()
      const log = join(dir, `better-auth-${storage}.out`)
      const fd = openSync(log, 'a')
      const child = await startNodeChild({
        name, args: [join(ROOT, 'bench', 'peers', 'better-auth', 'server.mjs')], cwd: ROOT, env: { ...BASE_ENV, PORT: String(port), PEER_STORAGE: storage, REDIS_URL: redis.url }, port, stdout: fd, readyPath: '/'
      }).finally(() => { closeSync(fd) })
      resources.add(child.stop)
      const dispatch = { path: '/api/auth/email-otp/send-verification-otp', body: (email: string) => JSON.stringify({ email, type: 'sign-in' }) }
      betterAuthTargets.push({
        name,
        url: child.url,
        headers: {},
        pid: child.pid,
        onRedis: storage === 'redis',
        dispatch,
        verify: { path: '/api/auth/sign-in/email-otp', body: (token, guess) => JSON.stringify({ email: token.requestId, otp: guess }) },
        // Its memory adapter copies the whole store on every sign-in: a pool sized from a fast
        // moment would take minutes once the store holds the dispatch run's codes.
        verifyPools: { warmup: 200, measured: 1000 },
        issue: codesFromPeerLog(child, log, dispatch)
      })
    }

    const refusalTarget = otpTarget('email-otp (Redis, refusals)', refusing, true)
    const memoryTarget = otpTarget('email-otp (memory)', inMemory, false)
    const templatesTargets = withTemplates === null ? [] : [otpTarget('email-otp (memory, templates)', withTemplates, false)]
    const peerTarget: OtpTarget = { name: 'Express peer', url: peer.url, headers: { authorization: `Bearer ${peerKey}` }, pid: peer.pid, onRedis: true, issue: seededPeerCodes(client) }
    const both = async (target: OtpTarget): Promise<GroupRun[]> => [
      { name: `${target.name} dispatch`, result: await measureDispatch(meter, target, MAIN_CONNECTIONS, MAIN_SECONDS, WARMUP_SECONDS) },
      { name: `${target.name} verify`, result: await measureVerify(meter, target, MAIN_CONNECTIONS, MAIN_SECONDS, WARMUP_SECONDS) }
    ]
    const unknownKey = generateKey('secret', 'live')
    const validBody = (): string => JSON.stringify({ email: nextAddress() })
    // Over BODY_LIMIT_BYTES (4 KiB by default) with a well-formed JSON body.
    const oversized = JSON.stringify({ email: 'x'.repeat(5000) + '@example.com' })
    const groups: Array<() => Promise<GroupRun[]>> = [
      async () => [
        { name: `${redisTarget.name} verify`, result: await measureVerify(meter, redisTarget, MAIN_CONNECTIONS, MAIN_SECONDS, WARMUP_SECONDS) },
        { name: `${redisTarget.name} verify, right code`, result: await measureVerify(meter, redisTarget, MAIN_CONNECTIONS, MAIN_SECONDS, WARMUP_SECONDS, 'right') },
        { name: `${redisTarget.name} verify, wrong code`, result: await measureVerify(meter, redisTarget, MAIN_CONNECTIONS, MAIN_SECONDS, WARMUP_SECONDS, 'wrong') }
      ],
      async () => [
        { name: 'refused 401 unknown key', refusal: 401, result: await measureRefusal(meter, redisTarget, { expected: 401, headers: { authorization: `Bearer ${unknownKey}` }, body: validBody }) },
        { name: 'refused 403 blocked source', refusal: 403, result: await measureRefusal(meter, refusalTarget, { expected: 403, body: validBody, localAddress: BLOCKED_SOURCE }) },
        { name: 'refused 429 over the per-source limit', refusal: 429, result: await measureRefusal(meter, refusalTarget, { expected: 429, body: validBody, localAddress: LIMITED_SOURCE }) },
        { name: 'refused 400 malformed JSON', refusal: 400, result: await measureRefusal(meter, redisTarget, { expected: 400, body: () => '{"email": "bench@example.com"' }) },
        { name: 'refused 413 body over the limit', refusal: 413, result: await measureRefusal(meter, redisTarget, { expected: 413, body: () => oversized }) }
      ],
      async () => await both(memoryTarget),
      ...templatesTargets.map((target) => async () => await both(target)),
      async () => await both(peerTarget),
      ...betterAuthTargets.map((target) => async () => await both(target))
    ]
    return { groups, peerGroups: betterAuthTargets.length }
  }
  const others = TRANSPORTS ? { groups: [], peerGroups: 0 } : await comparisons()
  const groups = [transportGroup, ...others.groups]

  const rows: Row[] = []
  const record = (row: Row): Measured => {
    rows.push(row)
    const { rps, p50, p99 } = row.result
    process.stderr.write(`  ${label(row).padEnd(52)} ${number(rps).padStart(8)} req/s  p50 ${number(p50, 2)} ms  p99 ${number(p99, 2)} ms\n`)
    return row.result
  }

  process.stderr.write(`\n${MAIN_CONNECTIONS} connections, ${WARMUP_SECONDS} s warm-up, ${MAIN_SECONDS} s measured; the bare route before and after each group\n`)
  const main = new Map<string, Row>()
  const bareRuns: Measured[] = []
  const measureBare = async (): Promise<Measured> => {
    const result = await measureDispatch(meter, bareTarget, MAIN_CONNECTIONS, MAIN_SECONDS, WARMUP_SECONDS)
    bareRuns.push(result)
    return result
  }
  const recordBare = (result: Measured): void => {
    record({ group: 'main', target: `bare route (${bareRuns.indexOf(result) + 1})`, connections: MAIN_CONNECTIONS, result, reference: bareReference([result]) })
  }
  let bareBefore = await measureBare()
  recordBare(bareBefore)
  const failedGroups: string[] = []
  for (const [index, group] of groups.entries()) {
    let runs: GroupRun[]
    try {
      runs = await group()
    } catch (error) {
      // better-auth failing (or timing out) costs its own rows, not the run.
      if (index < groups.length - others.peerGroups) throw error
      failedGroups.push(error instanceof Error ? error.message : String(error))
      continue
    }
    const bareAfter = await measureBare()
    const reference = bareReference([bareBefore, bareAfter])
    for (const { name, result, refusal } of runs) {
      const row: Row = { group: 'main', target: name, connections: MAIN_CONNECTIONS, result, reference, ...(refusal === undefined ? {} : { refusal }) }
      main.set(row.target, row)
      record(row)
    }
    recordBare(bareAfter)
    bareBefore = bareAfter
  }
  const bare = bareReference(bareRuns)

  if (!QUICK && !TRANSPORTS) {
    process.stderr.write(`\nemail-otp (Redis) by connections, ${CURVE_WARMUP_SECONDS} s warm-up, ${CURVE_SECONDS} s measured\n`)
    for (const connections of CURVE_CONNECTIONS) {
      record({ group: 'connections', target: 'email-otp (Redis) dispatch', connections, reference: bare, result: await measureDispatch(meter, redisTarget, connections, CURVE_SECONDS, CURVE_WARMUP_SECONDS) })
      record({ group: 'connections', target: 'email-otp (Redis) verify', connections, reference: bare, result: await measureVerify(meter, redisTarget, connections, CURVE_SECONDS, CURVE_WARMUP_SECONDS) })
    }

    process.stderr.write(`\nemail-otp (Redis) by live tokens preloaded, ${MAIN_CONNECTIONS} connections, ${CURVE_WARMUP_SECONDS} s warm-up, ${CURVE_SECONDS} s measured\n`)
    for (const preloaded of PRELOADS) {
      await client.flushdb()
      await loadTokens(client, preloaded)
      const keys = await client.dbsize()
      record({ group: 'preloaded', target: 'email-otp (Redis) dispatch', connections: MAIN_CONNECTIONS, keys, reference: bare, result: await measureDispatch(meter, redisTarget, MAIN_CONNECTIONS, CURVE_SECONDS, CURVE_WARMUP_SECONDS) })
      record({ group: 'preloaded', target: 'email-otp (Redis) verify', connections: MAIN_CONNECTIONS, keys, reference: bare, result: await measureVerify(meter, redisTarget, MAIN_CONNECTIONS, CURVE_SECONDS, CURVE_WARMUP_SECONDS) })
    }
  }

  const result = (name: string): Row => {
    const found = main.get(name)
    if (found === undefined) throw new Error(`no run named ${name}`)
    return found
  }
  // With --transports only the transport rows were run: the comparisons below are left out.
  const stores = TRANSPORTS ? [] : ['Redis', 'memory'] as const
  const vsExpress = stores.flatMap((store) => (['dispatch', 'verify'] as const).map((endpoint) => {
    const ours = result(`email-otp (${store}) ${endpoint}`).result
    const theirs = result(`Express peer ${endpoint}`).result
    return { store, endpoint, throughput: ours.rps / theirs.rps, p99: { ours: ours.p99, express: theirs.p99 }, cpuMicros: { ours: totalCpu(ours), express: totalCpu(theirs) } }
  }))
  const targets: Array<{ target: string, value: string, pass: boolean }> = []
  for (const ratio of vsExpress) {
    targets.push({
      target: `${ratio.endpoint} (${ratio.store}) ≥ ${TARGETS.vsExpress}× Express at lower p99`,
      value: `${ratio.throughput.toFixed(2)}×, p99 ${number(ratio.p99.ours, 2)} vs ${number(ratio.p99.express, 2)} ms`,
      pass: ratio.throughput >= TARGETS.vsExpress && ratio.p99.ours < ratio.p99.express
    })
  }
  for (const store of stores) {
    for (const endpoint of ['dispatch', 'verify'] as const) {
      const row = result(`email-otp (${store}) ${endpoint}`)
      const bareCpu = row.reference.cpuMicros
      const cpuRatio = row.result.cpuMicros === null || bareCpu === null || bareCpu === 0 ? null : row.result.cpuMicros / bareCpu
      targets.push({ target: `${endpoint} (${store}) service CPU ≤ ${TARGETS.cpuVsBare[endpoint]}× bare`, value: cpuRatio === null ? 'not measured' : `${cpuRatio.toFixed(1)}× (${micros(row.result.cpuMicros)} vs ${micros(bareCpu)} µs)`, pass: cpuRatio !== null && cpuRatio <= TARGETS.cpuVsBare[endpoint] })
      targets.push({ target: `${endpoint} (${store}) p99 ≤ ${TARGETS.p99Ms} ms`, value: `${number(row.result.p99, 2)} ms`, pass: row.result.p99 <= TARGETS.p99Ms })
    }
  }
  // The paths users run, as the service's own CPU per answer against the bare route's and the
  // log dispatch's of the same run (Redis's CPU apart: it is the same round trips on every path).
  const logDispatch = result('email-otp (Redis) dispatch')
  const realPaths = [
    'email-otp (Redis) dispatch', 'email-otp (Redis, SES) dispatch', 'email-otp (Redis, SMTP) dispatch',
    'email-otp (Redis) verify, right code', 'email-otp (Redis) verify, wrong code',
    'refused 401 unknown key', 'refused 403 blocked source', 'refused 429 over the per-source limit', 'refused 400 malformed JSON', 'refused 413 body over the limit'
  ].filter((name) => main.has(name)).map((name) => {
    const row = result(name)
    const ratio = (to: number | null): number | null => row.result.cpuMicros === null || to === null || to === 0 ? null : row.result.cpuMicros / to
    return { path: name, cpuMicros: row.result.cpuMicros, redisCpuMicros: row.result.redisCpuMicros, cpuVsBare: ratio(row.reference.cpuMicros), cpuVsLog: ratio(logDispatch.result.cpuMicros), rps: row.result.rps, p99: row.result.p99 }
  })
  // Latency as users feel it: each dispatch path at half the rate it sustained, against the
  // provider's own round trip (one message at a time from this process, nothing in between).
  process.stderr.write('\neach dispatch path at half the rate it sustained; the providers\' own round trip\n')
  const providers = { ses: await sesRoundTrip(ses.url), smtp: await smtpRoundTrip(smtpPort) }
  for (const [name, trip] of Object.entries(providers)) process.stderr.write(`  ${`${name.toUpperCase()} alone, one message at a time`.padEnd(52)} p50 ${number(trip.p50, 2)} ms  p99 ${number(trip.p99, 2)} ms\n`)
  const halfRate: Array<{ path: string, rate: number, p99: number, providerP99: number | null, boundMs: number }> = []
  for (const [target, provider] of [[redisTarget, null], [sesTarget, 'ses'], [smtpTarget, 'smtp']] as const) {
    const rate = Math.max(1, Math.floor(result(`${target.name} dispatch`).result.rps / 2))
    const measured = await measurePacedDispatch(meter, target, rate)
    record({ group: 'main', target: `${target.name} dispatch at half its rate`, connections: MAIN_CONNECTIONS, result: measured, reference: bare })
    const providerP99 = provider === null ? null : providers[provider].p99
    const boundMs = providerP99 === null ? TARGETS.halfRateP99Ms.log : providerP99 + TARGETS.halfRateP99Ms.aboveProvider
    halfRate.push({ path: `${target.name} dispatch`, rate: measured.rps, p99: measured.p99, providerP99, boundMs })
    targets.push({
      target: `${target.name} dispatch p99 at half its rate ≤ ${providerP99 === null ? `${TARGETS.halfRateP99Ms.log} ms` : `provider's p99 + ${TARGETS.halfRateP99Ms.aboveProvider} ms`}`,
      value: `${number(measured.p99, 2)} ms at ${number(measured.rps)} req/s${providerP99 === null ? '' : ` (bound ${number(boundMs, 2)} ms)`}`,
      pass: measured.p99 <= boundMs
    })
  }
  // The three dispatch paths again at one rate all of them sustain: at saturation each runs at
  // its own rate, and the work they share (Redis pipelines, socket wake-ups) costs more per
  // request where fewer requests share it.
  const fixedRate = TRANSPORTS ? Math.floor(FIXED_RATE_SHARE * Math.min(...[redisTarget, sesTarget, smtpTarget].map((target) => result(`${target.name} dispatch`).result.rps))) : null
  const fixed: Array<{ path: string, rps: number, cpuMicros: number | null, cpuVsLog: number | null, p99: number }> = []
  if (fixedRate !== null) {
    process.stderr.write(`\nthe three dispatch paths at ${number(fixedRate)} req/s\n`)
    for (const target of [redisTarget, sesTarget, smtpTarget]) {
      const measured = await measureDispatch(meter, target, MAIN_CONNECTIONS, MAIN_SECONDS, WARMUP_SECONDS, fixedRate)
      record({ group: 'main', target: `${target.name} dispatch at ${number(fixedRate)} req/s`, connections: MAIN_CONNECTIONS, result: measured, reference: bare })
      const log = fixed[0]?.cpuMicros ?? measured.cpuMicros
      fixed.push({ path: `${target.name} dispatch`, rps: measured.rps, cpuMicros: measured.cpuMicros, cpuVsLog: measured.cpuMicros === null || log === null || log === 0 ? null : measured.cpuMicros / log, p99: measured.p99 })
    }
  }
  const real = (name: string): (typeof realPaths)[number] => realPaths.find((path) => path.path === name) as (typeof realPaths)[number]
  const ratioText = (value: number | null): string => value === null ? 'not measured' : `${value.toFixed(2)}×`
  const atMost = (value: number | null, limit: number): boolean => value !== null && value <= limit
  for (const [name, limit] of [['email-otp (Redis, SES) dispatch', TARGETS.vsLog.ses], ['email-otp (Redis, SMTP) dispatch', TARGETS.vsLog.smtp]] as const) {
    const path = real(name)
    targets.push({ target: `${name} service CPU ≤ ${limit}× log dispatch`, value: ratioText(path.cpuVsLog), pass: atMost(path.cpuVsLog, limit) })
    targets.push({ target: `${name} p99 ≤ ${TARGETS.realP99Ms} ms`, value: `${number(path.p99, 2)} ms`, pass: path.p99 <= TARGETS.realP99Ms })
  }
  if (!TRANSPORTS) {
    for (const name of ['refused 401 unknown key', 'refused 403 blocked source', 'refused 429 over the per-source limit']) {
      const path = real(name)
      targets.push({ target: `${name}: service CPU ≤ ${TARGETS.refusalVsBare}× bare`, value: ratioText(path.cpuVsBare), pass: atMost(path.cpuVsBare, TARGETS.refusalVsBare) })
    }
    for (const name of ['refused 400 malformed JSON', 'refused 413 body over the limit']) {
      const path = real(name)
      targets.push({ target: `${name}: p99 ≤ ${TARGETS.refusalP99Ms} ms`, value: `${number(path.p99, 2)} ms`, pass: path.p99 <= TARGETS.refusalP99Ms })
    }
    const right = real('email-otp (Redis) verify, right code').cpuMicros
    const wrong = real('email-otp (Redis) verify, wrong code').cpuMicros
    const rightVsWrong = right === null || wrong === null || wrong === 0 ? null : right / wrong
    targets.push({ target: `verify, right code: service CPU ≤ ${TARGETS.rightVsWrong}× wrong code`, value: ratioText(rightVsWrong), pass: atMost(rightVsWrong, TARGETS.rightVsWrong) })
  }
  const vsBetterAuth = stores.flatMap((store) => (['dispatch', 'verify'] as const).filter((endpoint) => main.has(`better-auth (${store}) ${endpoint}`)).map((endpoint) => {
    const ours = result(`email-otp (${store}) ${endpoint}`).result
    const theirs = result(`better-auth (${store}) ${endpoint}`).result
    return { store, endpoint, throughput: ours.rps / theirs.rps, p99: { ours: ours.p99, betterAuth: theirs.p99 }, cpuMicros: { ours: totalCpu(ours), betterAuth: totalCpu(theirs) } }
  }))
  for (const ratio of vsBetterAuth) {
    targets.push({ target: `${ratio.endpoint} (${ratio.store}) ≥ ${TARGETS.vsBetterAuth}× better-auth`, value: `${ratio.throughput.toFixed(2)}×, p99 ${number(ratio.p99.ours, 2)} vs ${number(ratio.p99.betterAuth, 2)} ms`, pass: ratio.throughput >= TARGETS.vsBetterAuth })
  }
  const cpuList = cpus()
  const busy = { atStart: busyAtStart, atEnd: await machineBusy() }
  const warnings = [...rows.flatMap(problems), ...failedGroups.map((message) => `a peer's runs failed: ${message}`)]
  for (const [when, share] of Object.entries(busy)) {
    if (share !== null && share > BUSY_MACHINE) warnings.push(`other work used ${(100 * share).toFixed(0)}% of the machine's CPU ${when === 'atStart' ? 'before the runs' : 'after them'}: figures are low and noisy`)
  }
  const machine = {
    cpu: cpuList[0]?.model ?? 'unknown',
    cores: cpuList.length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    os: `${type()} ${release()}`,
    node: process.version,
    redis: /redis_version:(\S+)/.exec(await client.info('server'))?.[1] ?? 'unknown',
    /** Share of all cores busy with other work, in the second before the runs and after them. */
    busy
  }
  const percent = (share: number | null): string => share === null ? 'unknown' : `${(100 * share).toFixed(0)}%`

  const targetWidth = Math.max(...targets.map(({ target }) => target.length))
  const out = [
    '',
    ...table(rows),
    ...(vsExpress.length === 0 ? [] : ['', 'email-otp (Redis) / Express peer']),
    ...vsExpress.map(({ store, endpoint, throughput, p99, cpuMicros }) =>
      `  ${`${endpoint} (${store})`.padEnd(18)}  ${throughput.toFixed(2)}× throughput, p99 ${number(p99.ours, 2)} ms vs ${number(p99.express, 2)} ms, CPU with Redis ${micros(cpuMicros.ours)} µs vs ${micros(cpuMicros.express)} µs per request`),
    ...(vsBetterAuth.length === 0 ? [] : ['', 'email-otp / better-auth (same store)']),
    ...vsBetterAuth.map(({ store, endpoint, throughput, p99, cpuMicros }) =>
      `  ${`${endpoint} (${store})`.padEnd(18)}  ${throughput.toFixed(2)}× throughput, p99 ${number(p99.ours, 2)} ms vs ${number(p99.betterAuth, 2)} ms, CPU with Redis ${micros(cpuMicros.ours)} µs vs ${micros(cpuMicros.betterAuth)} µs per request`),
    '',
    'real paths (the service\'s own CPU per answer; Redis apart)',
    ...realPaths.map((path) => `  ${path.path.padEnd(40)}  ${micros(path.cpuMicros).padStart(6)} µs  ${ratioText(path.cpuVsBare).padStart(7)} bare  ${ratioText(path.cpuVsLog).padStart(7)} log  p99 ${number(path.p99, 2).padStart(9)} ms`),
    '',
    'each dispatch path at half the rate it sustained (p99 as users feel it; the provider\'s own p99 one message at a time)',
    ...halfRate.map((path) => `  ${path.path.padEnd(40)}  ${number(path.rate).padStart(6)} req/s  p99 ${number(path.p99, 2).padStart(9)} ms${path.providerP99 === null ? '' : `  provider ${number(path.providerP99, 2)} ms`}`),
    ...(fixedRate === null ? [] : ['', `the same paths at one rate, ${number(fixedRate)} req/s (the service's own CPU per answer)`]),
    ...fixed.map((path) => `  ${path.path.padEnd(40)}  ${micros(path.cpuMicros).padStart(6)} µs  ${ratioText(path.cpuVsLog).padStart(7)} log  ${number(path.rps).padStart(6)} req/s  p99 ${number(path.p99, 2).padStart(9)} ms`),
    '',
    `targets (${MAIN_CONNECTIONS} connections)`,
    ...targets.map(({ target, value, pass }) => `  ${pass ? 'PASS' : 'MISS'}  ${target.padEnd(targetWidth)}  ${value}`),
    ...(warnings.length === 0 ? [] : ['', 'WARNINGS', ...warnings.map((warning) => `  ${warning}`)]),
    '',
    `${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, ${machine.os}, node ${machine.node}, redis ${machine.redis}`,
    `machine busy with other work: ${percent(busy.atStart)} before the runs, ${percent(busy.atEnd)} after; ${((Date.now() - started) / 1000).toFixed(0)} s in all; written to bench/results.json`
  ]
  process.stdout.write(out.join('\n') + '\n')

  writeFileSync(join(ROOT, 'bench', 'results.json'), JSON.stringify({
    date: new Date(started).toISOString(),
    machine,
    settings: { quick: QUICK, transports: TRANSPORTS, templates: TEMPLATES, mainConnections: MAIN_CONNECTIONS, mainSeconds: MAIN_SECONDS, warmupSeconds: WARMUP_SECONDS, curveConnections: CURVE_CONNECTIONS, curveSeconds: CURVE_SECONDS, curveWarmupSeconds: CURVE_WARMUP_SECONDS, preloads: PRELOADS },
    runs: rows.map((row) => ({ group: row.group, target: row.target, connections: row.connections, ...(row.keys === undefined ? {} : { keys: row.keys }), ...row.result, ratioToBare: row.result.rps / row.reference.rps, bareReference: row.reference })),
    vsExpress,
    vsBetterAuth,
    realPaths,
    halfRate: { providers, paths: halfRate },
    ...(fixedRate === null ? {} : { fixedRate: { rate: fixedRate, paths: fixed } }),
    targets,
    warnings
  }, null, 2) + '\n')
}

await runWithResources(main)
