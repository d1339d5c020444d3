/*
 * Where the Redis-backed service spends its CPU under load. Run after `npm run bench` (or
 * any build of dist/ and .bench-build/):
 *
 *   node .bench-build/bench/profile.js [--memory]
 *
 * Starts a private redis-server and, once per endpoint, `node --cpu-prof dist/server.js`;
 * drives 50 connections of dispatch (fresh addresses) or verify (half right, half wrong
 * guesses) for 10 s, stops the service so that V8 writes the profile, and prints where the
 * CPU time went while the load ran, by package or file and by function. The verify pool is
 * written into Redis by the service's own issueCode with the service's HMAC key, so the
 * verify profile holds no dispatch traffic.
 */
import { createSecretKey, randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { CodeSigner } from '../lib/otp/signer.js'
import { issueCode } from '../lib/otp/codes.js'
import { addressHash } from '../lib/receipts/address-hash.js'
import { RedisTokenStore } from '../lib/tokens/redis-token-store.js'
import { startRedis } from '../test/support/redis.js'
import { Resources } from './support/children.js'
import { runLoad, type LoadResult } from './support/load.js'
import { ROOT, benchTenant, dispatchRequest, nextAddress, startService, verifyRequests, type Token } from './support/service.js'
import { TOKEN_TTL_MS } from './support/tokens.js'

const CONNECTIONS = 50
/** `--memory`: the embedded default (in-process stores) instead of Redis. */
const IN_MEMORY = process.argv.includes('--memory')
const SECONDS = 10
/** Verify warms up on this many codes; its rate sizes the measured pool to at least SECONDS. */
const WARMUP_CODES = 10_000
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

async function main (resources: Resources): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-profile-'))
  resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })
  const redis = await startRedis()
  resources.add(redis.stop)
  const client = new Redis(redis.url)
  resources.add(async () => { client.disconnect() })
  const tenant = benchTenant(dir)
  const headers = { authorization: `Bearer ${tenant.liveKey}` }

  // The memory store's verify pool could only come from its mail log: dispatch alone there.
  for (const endpoint of IN_MEMORY ? ['dispatch'] as const : ['dispatch', 'verify'] as const) {
    const profileDir = join(dir, endpoint)
    const service = await startService(resources, {
      name: `email-otp (${IN_MEMORY ? 'memory' : 'Redis'}, ${endpoint})`,
      dir,
      env: IN_MEMORY ? tenant.env : { ...tenant.env, REDIS_URL: redis.url },
      nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profileDir]
    })
    let result: LoadResult
    let from: number
    if (endpoint === 'dispatch') {
      // The first seconds compile and optimise: not what the service spends at speed.
      await runLoad({ url: service.child.url, path: '/otp/request', headers, connections: CONNECTIONS, seconds: 2, next: dispatchRequest })
      from = monotonicMicros()
      result = await runLoad({ url: service.child.url, path: '/otp/request', headers, connections: CONNECTIONS, seconds: SECONDS, next: dispatchRequest })
    } else {
      const store = new RedisTokenStore(client)
      const signer = new CodeSigner([{ id: 'k1', secret: tenant.hmacSecret }])
      const scope = { tenantId: 'bench', mode: 'live' as const }
      const addressKey = createSecretKey(randomBytes(32))
      const seed = async (count: number): Promise<Token[]> => await Promise.all(
        Array.from({ length: count }, async () => {
          const address = nextAddress()
          return await issueCode(store, signer, scope, signer.tag(address), addressHash(addressKey, address), TOKEN_TTL_MS)
        })
      )
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
      `${endpoint}: ${Math.round(result.rps).toLocaleString('en')} req/s, p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms at ${CONNECTIONS} connections (statuses ${JSON.stringify(result.statuses)})`,
      ...analyse(profile, from, to)
    ].join('\n') + '\n')
  }
}

const resources = new Resources()
try {
  await main(resources)
} catch (error) {
  process.stderr.write(`profile failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
  process.exitCode = 1
} finally {
  await resources.close()
}
