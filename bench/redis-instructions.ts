/*
 * What a dispatch costs Redis, in instructions: the built service (dist/server.js, log mailer)
 * on a private redis-server run under `valgrind --tool=callgrind`, a warm-up, then a fixed
 * number of dispatches at a fixed rate, each to a new address; Redis's instructions over those
 * dispatches (callgrind's count, zeroed after the warm-up) divided by their number.
 *
 *   npm run bench:redis-instructions [-- --dispatches 2000 --rate 150]
 *
 * Instructions, not seconds: the count is the same from run to run whatever else the machine
 * does (two runs of one build agree within 0.3%), where Redis's CPU time per dispatch in
 * `npm run bench` moves by a third between runs on a busy 2-core machine. It compares builds
 * and script changes, not machines. Under valgrind Redis runs about 50 times slower, so the
 * rate must stay below what it answers (about 170 dispatches a second on 2 cores): at a fixed
 * rate the writes that gather (WRITE_BEHIND_MS) carry the same number of requests in every run.
 * Needs valgrind and redis-server on the PATH.
 */
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { freePort } from '../test/support/redis.js'
import { runWithResources, type Resources } from './support/children.js'
import { runLoad } from './support/load.js'
import { benchTenant, dispatchRequest, startService } from './support/service.js'

const { values } = parseArgs({
  options: {
    dispatches: { type: 'string', default: '2000' },
    rate: { type: 'string', default: '150' }
  }
})
const DISPATCHES = Number(values.dispatches)
const RATE = Number(values.rate)
const CONNECTIONS = 20
const WARMUP = 300

/** The instruction total of the callgrind dump taken after the measured load (`--dump=measured`). */
function measuredInstructions (dir: string): number {
  for (const file of readdirSync(dir)) {
    if (!file.startsWith('callgrind.out.')) continue
    const text = readFileSync(join(dir, file), 'utf8')
    if (!text.includes('\ntrigger: Program termination') && text.includes('measured')) {
      const total = /^(?:summary|totals): (\d+)/m.exec(text)
      if (total?.[1] !== undefined) return Number(total[1])
    }
  }
  throw new Error('callgrind wrote no dump of the measured load')
}

async function startRedisUnderCallgrind (resources: Resources, dir: string): Promise<{ url: string, pid: number }> {
  const port = await freePort()
  const redis = spawn('valgrind', [
    '--tool=callgrind', `--callgrind-out-file=${join(dir, 'callgrind.out')}`,
    'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir
  ], { stdio: ['ignore', 'pipe', 'ignore'] })
  resources.add(async () => { redis.kill('SIGKILL') })
  let output = ''
  redis.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  for (let i = 0; i < 600 && !output.includes('Ready to accept connections'); i++) {
    if (redis.exitCode !== null) throw new Error(`redis-server under valgrind exited: ${output}`)
    await sleep(100)
  }
  if (redis.pid === undefined || !output.includes('Ready to accept connections')) throw new Error('redis-server under valgrind did not start')
  return { url: `redis://127.0.0.1:${port}`, pid: redis.pid }
}

await runWithResources(async (resources) => {
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-redis-instructions-'))
  resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })
  const redis = await startRedisUnderCallgrind(resources, dir)
  const tenant = benchTenant(dir)
  const service = await startService(resources, { name: 'email-otp (Redis under callgrind)', dir, env: { ...tenant.env, REDIS_URL: redis.url } })
  const load = async (amount: number): Promise<Awaited<ReturnType<typeof runLoad>>> => await runLoad({
    url: service.child.url, path: '/otp/request', headers: { authorization: `Bearer ${tenant.liveKey}` }, connections: CONNECTIONS, rate: RATE, amount, next: dispatchRequest
  })
  await load(WARMUP)
  await sleep(500)
  execFileSync('callgrind_control', ['--zero', String(redis.pid)], { stdio: 'ignore' })
  const result = await load(DISPATCHES)
  // The last writes gathered behind the load (WRITE_BEHIND_MS) land before the dump.
  await sleep(500)
  execFileSync('callgrind_control', ['--dump=measured', String(redis.pid)], { stdio: 'ignore' })
  await sleep(500)
  const failed = result.requests - (result.statuses['200'] ?? 0)
  if (failed > 0) throw new Error(`${failed} dispatches did not answer 200: ${JSON.stringify(result.statuses)}`)
  const perDispatch = measuredInstructions(dir) / result.requests
  process.stdout.write(`${result.requests.toLocaleString('en')} dispatches at ${Math.round(result.rps)}/s (${CONNECTIONS} connections): Redis ${Math.round(perDispatch).toLocaleString('en')} instructions per dispatch\n`)
}, 'redis-instructions')
