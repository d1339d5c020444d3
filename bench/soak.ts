/*
 * Soak: two service instances sharing one private Redis, driven with mixed traffic for a few
 * minutes. Codes are dispatched on one instance and verified on the other, so every check
 * crosses processes the way a load-balanced deployment does.
 *
 *   npm run soak -- --minutes 2 [--rate 200]
 *
 * --minutes: how long to drive traffic (default 2). --rate: at most this many requests per
 * second in all (default: as fast as CONCURRENCY flows allow).
 *
 * Fails (exit 1) on any 5xx other than the 502 the sandbox fail simulator must give, on any
 * requestId that verifies twice, on an answer that never came, on an instance that died, or
 * when nothing verified at all (a soak that proved nothing). Every other surprise (a right
 * code answering 400, say) is counted and listed in the summary.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes, randomInt } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { generateKey, hashKey } from '../lib/keys/api-keys.js'
import { freePort, startRedis, type RedisServer } from '../test/support/redis.js'

const CONCURRENCY = 20
const REQUEST_TIMEOUT_MS = 10_000
const READY_TIMEOUT_MS = 20_000
const STOP_TIMEOUT_MS = 5_000
const PROGRESS_EVERY_MS = 15_000
// The service's velocity limits and lockout are for abusers; here they would only turn the
// soak into a measurement of 429s.
const HIGH_LIMIT = '100000000/1m'
const FAIL_RECIPIENT = 'fail@simulator.invalid'

// Compiled to .bench-build/bench/soak.js; the service is the build in <root>/dist.
const root = fileURLToPath(new URL('../..', import.meta.url))

function readOptions (): { minutes: number, rate: number | null } {
  const { values } = parseArgs({ options: { minutes: { type: 'string' }, rate: { type: 'string' } } })
  const minutes = Number(values.minutes ?? '2')
  const rate = values.rate === undefined ? null : Number(values.rate)
  if (!Number.isFinite(minutes) || minutes <= 0) throw new Error(`--minutes must be a positive number (got ${values.minutes})`)
  if (rate !== null && (!Number.isFinite(rate) || rate <= 0)) throw new Error(`--rate must be a positive number (got ${values.rate})`)
  return { minutes, rate }
}

// ---------------------------------------------------------------------------------------
// What the run saw.

const stats = {
  requests: 0,
  byStatus: new Map<number, number>(),
  unexpected5xx: 0,
  expected502: 0,
  codesIssued: 0,
  doubleSuccesses: 0,
  transportErrors: 0,
  instanceExits: 0,
  unexpected: new Map<string, number>(),
  latenciesMs: [] as number[]
}
/** 200 answers per requestId: more than one is a double success. */
const successes = new Map<string, number>()

function unexpected (what: string): void {
  stats.unexpected.set(what, (stats.unexpected.get(what) ?? 0) + 1)
}

function recordSuccess (requestId: string): void {
  const count = (successes.get(requestId) ?? 0) + 1
  successes.set(requestId, count)
  if (count === 2) stats.doubleSuccesses++
}

// ---------------------------------------------------------------------------------------
// Stopping: at the deadline, or on SIGINT/SIGTERM. In-flight requests are aborted then, and
// what they see afterwards is not held against the service.

const stop = new AbortController()
let interrupted = false
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stop.signal.aborted) return
    interrupted = true
    process.stderr.write(`\nsoak: ${signal}, stopping\n`)
    stop.abort()
  })
}

// ---------------------------------------------------------------------------------------
// The service instances.

interface Instance {
  name: string
  base: string
  child: ChildProcess
  /** The last lines the process wrote to stderr (start-up errors, crashes). */
  stderr: string[]
}

const children: ChildProcess[] = []

async function startInstance (name: string, env: Record<string, string>): Promise<Instance> {
  const port = await freePort()
  // A clean environment: the caller's own MAIL_TRANSPORT or REDIS_URL must not leak in.
  const child = spawn(process.execPath, [join(root, 'dist/server.js')], {
    cwd: root,
    env: { ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'ignore', 'pipe']
  })
  children.push(child)
  const instance: Instance = { name, base: `http://127.0.0.1:${port}`, child, stderr: [] }
  child.stderr?.on('data', (chunk: Buffer) => {
    instance.stderr.push(...chunk.toString().split('\n').filter((line) => line !== ''))
    instance.stderr.splice(0, Math.max(0, instance.stderr.length - 20))
  })

  const deadline = Date.now() + READY_TIMEOUT_MS
  let ready = false
  while (!ready && Date.now() < deadline && !stop.signal.aborted) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited during start-up: ${instance.stderr.join(' | ') || '(no output)'}`)
    }
    try {
      ready = (await fetch(`${instance.base}/readyz`, { signal: AbortSignal.timeout(1_000) })).status === 200
    } catch {
      // Not listening yet.
    }
    if (!ready) await sleep(100)
  }
  if (!ready && !stop.signal.aborted) throw new Error(`${name} was not ready within ${READY_TIMEOUT_MS} ms: ${instance.stderr.join(' | ')}`)

  child.once('exit', (code, signal) => {
    if (stop.signal.aborted) return
    stats.instanceExits++
    process.stderr.write(`soak: ${name} exited (${signal ?? code}) during the run: ${instance.stderr.join(' | ')}\n`)
  })
  return instance
}

async function stopChild (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = once(child, 'exit')
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS)
  await exited
  clearTimeout(timer)
}

interface TenantOptions { limits: boolean }

function writeTenantsFile (path: string, key: string, { limits }: TenantOptions): void {
  const tenant = {
    id: 'soak',
    tier: 'soak',
    keys: [{ id: 'soak_test', kind: 'secret', mode: 'test', sha256: hashKey(key) }],
    ...(limits ? { limits: { recipient: HIGH_LIMIT, source: HIGH_LIMIT, key: HIGH_LIMIT } } : {})
  }
  const file = { tiers: { soak: { allowance: 0, window: '1d', sandboxAllowance: 100_000_000 } }, tenants: [tenant] }
  writeFileSync(path, JSON.stringify(file, null, 2))
}

// ---------------------------------------------------------------------------------------
// HTTP.

interface Answer {
  status: number
  body: { code?: string, data?: { requestId?: string, messages?: Array<{ requestId: string, code: string }> } }
}

let nextSlot = 0

/** Spaces requests out to --rate per second, if given. */
async function pace (rate: number | null): Promise<void> {
  if (rate === null) return
  const now = Date.now()
  const slot = Math.max(now, nextSlot)
  nextSlot = slot + 1000 / rate
  if (slot > now) await sleep(slot - now)
}

function makeCaller (key: string, rate: number | null) {
  /** One request; null when the run is stopping (its outcome no longer counts). */
  return async function call (instance: Instance, method: 'GET' | 'POST', path: string, body?: unknown, { failSimulator = false } = {}): Promise<Answer | null> {
    await pace(rate)
    if (stop.signal.aborted) return null
    const started = performance.now()
    try {
      const response = await fetch(instance.base + path, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.any([stop.signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)])
      })
      const text = await response.text()
      if (stop.signal.aborted) return null
      stats.requests++
      stats.latenciesMs.push(performance.now() - started)
      stats.byStatus.set(response.status, (stats.byStatus.get(response.status) ?? 0) + 1)
      if (response.status === 502 && failSimulator) stats.expected502++
      else if (response.status >= 500) stats.unexpected5xx++
      let parsed: Answer['body'] = {}
      try {
        parsed = JSON.parse(text) as Answer['body']
      } catch {
        unexpected(`${method} ${path.split('?')[0]}: body is not JSON (${response.status})`)
      }
      return { status: response.status, body: parsed }
    } catch (error) {
      if (stop.signal.aborted) return null
      stats.transportErrors++
      unexpected(`${method} ${path.split('?')[0]} on ${instance.name}: no answer (${(error as Error).message})`)
      return null
    }
  }
}

type Call = ReturnType<typeof makeCaller>

function expect (answer: Answer | null, status: number, code: string | undefined, what: string): boolean {
  if (answer === null) return false
  if (answer.status === status && answer.body.code === code) return true
  unexpected(`${what}: ${answer.status} ${answer.body.code ?? ''}, expected ${status} ${code ?? ''}`.trim())
  return false
}

// ---------------------------------------------------------------------------------------
// Traffic: flows of one to three steps, each crossing from one instance to the other.

let turn = 0

function pair (instances: readonly [Instance, Instance]): [Instance, Instance] {
  const first = turn++ % 2
  return [instances[first] as Instance, instances[1 - first] as Instance]
}

/** Dispatches to a fresh address and reads its code back from the other instance's inbox. */
async function issue (call: Call, here: Instance, there: Instance): Promise<{ requestId: string, code: string } | null> {
  const email = `soak.${randomBytes(6).toString('hex')}@example.com`
  const dispatched = await call(here, 'POST', '/otp/request', { email })
  if (!expect(dispatched, 200, undefined, 'dispatch')) return null
  const requestId = dispatched?.body.data?.requestId
  if (requestId === undefined) {
    unexpected('dispatch: 200 without a requestId')
    return null
  }
  stats.codesIssued++
  const inbox = await call(there, 'GET', `/sandbox/messages?email=${encodeURIComponent(email)}`)
  if (!expect(inbox, 200, undefined, 'sandbox inbox')) return null
  const code = inbox?.body.data?.messages?.find((message) => message.requestId === requestId)?.code
  if (code === undefined) {
    unexpected('sandbox inbox: no message for the requestId just issued')
    return null
  }
  return { requestId, code }
}

async function verify (call: Call, instance: Instance, requestId: string, userGuess: string): Promise<Answer | null> {
  const answer = await call(instance, 'POST', '/otp/verify', { requestId, userGuess })
  if (answer?.status === 200) recordSuccess(requestId)
  return answer
}

const wrongGuess = (code: string): string => String((Number(code) + 1 + randomInt(999_998)) % 1_000_000).padStart(6, '0')
// Each reaches the handler (the schema allows 1 to 64 characters) and so consumes the code.
const MALFORMED_GUESSES = ['12ab56', '１２３４５６', '12345', '1234567', ' 12 34 ', '0x1E24']

const flows: ReadonlyArray<{ weight: number, run: (call: Call, here: Instance, there: Instance) => Promise<void> }> = [
  {
    // The right code on the other instance, then sometimes replayed.
    weight: 55,
    async run (call, here, there) {
      const issued = await issue(call, here, there)
      if (issued === null) return
      expect(await verify(call, there, issued.requestId, issued.code), 200, undefined, 'right code')
      if (Math.random() < 0.3) expect(await verify(call, here, issued.requestId, issued.code), 400, 'CODE_MISMATCH', 'replay of a used requestId')
    }
  },
  {
    // A wrong guess consumes the code: the right one afterwards fails too.
    weight: 12,
    async run (call, here, there) {
      const issued = await issue(call, here, there)
      if (issued === null) return
      expect(await verify(call, there, issued.requestId, wrongGuess(issued.code)), 400, 'CODE_MISMATCH', 'wrong code')
      expect(await verify(call, here, issued.requestId, issued.code), 400, 'CODE_MISMATCH', 'right code after a wrong one')
    }
  },
  {
    weight: 10,
    async run (call, here, there) {
      const issued = await issue(call, here, there)
      if (issued === null) return
      const guess = MALFORMED_GUESSES[randomInt(MALFORMED_GUESSES.length)] as string
      expect(await verify(call, there, issued.requestId, guess), 400, 'INVALID_CODE_FORMAT', 'malformed guess')
      expect(await verify(call, here, issued.requestId, issued.code), 400, 'CODE_MISMATCH', 'right code after a malformed one')
    }
  },
  {
    // The right code on both instances at once: exactly one may win.
    weight: 8,
    async run (call, here, there) {
      const issued = await issue(call, here, there)
      if (issued === null) return
      const answers = await Promise.all([verify(call, here, issued.requestId, issued.code), verify(call, there, issued.requestId, issued.code)])
      if (answers.some((answer) => answer === null)) return
      const winners = answers.filter((answer) => answer?.status === 200).length
      if (winners === 0) unexpected('race: the right code verified on neither instance')
      for (const answer of answers) {
        if (answer !== null && answer.status !== 200) expect(answer, 400, 'CODE_MISMATCH', 'race loser')
      }
    }
  },
  {
    weight: 5,
    async run (call, here) {
      expect(await call(here, 'POST', '/otp/request', { email: FAIL_RECIPIENT }, { failSimulator: true }), 502, 'DELIVERY_FAILED', 'fail simulator')
    }
  },
  {
    weight: 5,
    async run (call, here) {
      const requestId = `otp_${randomBytes(18).toString('base64url')}`
      expect(await verify(call, here, requestId, '123456'), 400, 'CODE_MISMATCH', 'never-issued requestId')
    }
  }
]

const totalWeight = flows.reduce((sum, flow) => sum + flow.weight, 0)

function pickFlow (): (typeof flows)[number] {
  let ticket = randomInt(totalWeight)
  for (const flow of flows) {
    ticket -= flow.weight
    if (ticket < 0) return flow
  }
  return flows[0] as (typeof flows)[number]
}

async function drive (instances: readonly [Instance, Instance], call: Call, deadline: number): Promise<void> {
  const started = Date.now()
  const progress = setInterval(() => {
    process.stderr.write(`soak: ${Math.round((Date.now() - started) / 1000)}s, ${stats.requests} requests, ` +
      `${stats.unexpected5xx} unexpected 5xx, ${stats.doubleSuccesses} double successes\n`)
  }, PROGRESS_EVERY_MS)
  const worker = async (): Promise<void> => {
    while (Date.now() < deadline && !stop.signal.aborted) {
      const [here, there] = pair(instances)
      await pickFlow().run(call, here, there)
    }
  }
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  } finally {
    clearInterval(progress)
  }
}

// ---------------------------------------------------------------------------------------

function percentile (sorted: readonly number[], fraction: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] as number
}

function summary (elapsedMs: number, limitsInTenant: boolean, interrupted: boolean): { failed: boolean, text: string } {
  const verifiedOnce = [...successes.values()].filter((count) => count === 1).length
  const sorted = [...stats.latenciesMs].sort((a, b) => a - b)
  const failures = [
    stats.unexpected5xx > 0 && 'unexpected 5xx',
    stats.doubleSuccesses > 0 && 'double successes',
    stats.transportErrors > 0 && 'requests without an answer',
    stats.instanceExits > 0 && 'an instance died',
    verifiedOnce === 0 && 'no code verified'
  ].filter((reason): reason is string => typeof reason === 'string')
  const rows: Array<[string, string | number]> = [
    ['duration', `${(elapsedMs / 60_000).toFixed(2)} min`],
    ['instances', 2],
    ['tenant limits from', limitsInTenant ? 'tenants file' : 'environment'],
    ['requests', stats.requests],
    ['throughput', `${(stats.requests / (elapsedMs / 1000)).toFixed(0)} req/s`],
    ['latency p50 / p99 / max', `${percentile(sorted, 0.5).toFixed(1)} / ${percentile(sorted, 0.99).toFixed(1)} / ${(sorted.at(-1) ?? 0).toFixed(1)} ms`],
    ...[...stats.byStatus].sort(([a], [b]) => a - b).map(([status, count]): [string, number] => [`answers ${status}`, count]),
    ['5xx (unexpected)', stats.unexpected5xx],
    ['502 from the fail simulator', stats.expected502],
    ['codes issued', stats.codesIssued],
    ['codes verified exactly once', verifiedOnce],
    ['double successes', stats.doubleSuccesses],
    ['unexpected answers', [...stats.unexpected.values()].reduce((sum, count) => sum + count, 0)],
    ['requests without an answer', stats.transportErrors],
    ['instance exits', stats.instanceExits]
  ]
  const width = Math.max(...rows.map(([label]) => label.length))
  const lines = ['', 'email-otp soak summary', '-'.repeat(width + 14), ...rows.map(([label, value]) => `${label.padEnd(width)}  ${String(value).padStart(10)}`)]
  if (stats.unexpected.size > 0) {
    lines.push('', 'unexpected answers:', ...[...stats.unexpected].sort(([, a], [, b]) => b - a).slice(0, 15).map(([what, count]) => `  ${String(count).padStart(6)}  ${what}`))
  }
  const verdict = failures.length > 0 ? `FAIL: ${failures.join(', ')}` : interrupted ? 'INTERRUPTED: no failure before the stop' : 'PASS'
  lines.push('', verdict)
  return { failed: failures.length > 0, text: lines.join('\n') }
}

async function main (): Promise<number> {
  const { minutes, rate } = readOptions()
  const workdir = mkdtempSync(join(tmpdir(), 'email-otp-soak-'))
  const tenantsPath = join(workdir, 'tenants.json')
  const key = generateKey('secret', 'test')
  let redis: RedisServer | null = null
  try {
    redis = await startRedis()
    const env: Record<string, string> = {
      TENANTS_FILE: tenantsPath,
      REDIS_URL: redis.url,
      OTP_HMAC_KEYS: 'k1:' + randomBytes(32).toString('base64'),
      LOG_LEVEL: 'warn',
      RATE_LIMIT_RECIPIENT: HIGH_LIMIT,
      RATE_LIMIT_SOURCE: HIGH_LIMIT,
      RATE_LIMIT_KEY: HIGH_LIMIT,
      RATE_LIMIT_MAILBOX: HIGH_LIMIT,
      RATE_LIMIT_ACCOUNT: HIGH_LIMIT,
      RATE_LIMIT_PUBLIC: HIGH_LIMIT,
      LOCKOUT_THRESHOLD: '100000000'
    }

    // Per-tenant limits are newer than the tenants schema of some builds: a build that does
    // not know them refuses the file naming the field, and then the environment's limits do.
    let limitsInTenant = true
    writeTenantsFile(tenantsPath, key, { limits: true })
    let first: Instance
    try {
      first = await startInstance('instance A', env)
    } catch (error) {
      if (!/\/limits\b/.test((error as Error).message)) throw error
      limitsInTenant = false
      writeTenantsFile(tenantsPath, key, { limits: false })
      first = await startInstance('instance A', env)
    }
    const second = await startInstance('instance B', env)
    if (stop.signal.aborted) return 130

    process.stderr.write(`soak: ${minutes} min against ${first.base} and ${second.base} (redis ${redis.url}), ` +
      `${CONCURRENCY} flows in flight${rate === null ? '' : `, at most ${rate} req/s`}\n`)
    const started = Date.now()
    await drive([first, second], makeCaller(key, rate), started + minutes * 60_000)
    const elapsedMs = Date.now() - started
    // Nothing counts from here on: the children are about to be stopped on purpose.
    stop.abort()

    const { failed, text } = summary(elapsedMs, limitsInTenant, interrupted)
    process.stdout.write(text + '\n')
    if (interrupted) return 130
    return failed ? 1 : 0
  } finally {
    stop.abort()
    await Promise.all(children.map(stopChild))
    await redis?.stop()
    rmSync(workdir, { recursive: true, force: true })
  }
}

main().then((code) => { process.exitCode = code }, (error: unknown) => {
  process.stderr.write(`soak: ${error instanceof Error ? error.message : String(error)}\n`)
  process.exitCode = 1
})
