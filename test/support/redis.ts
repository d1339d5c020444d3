import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdirSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { killOnExit } from './processes.js'

/** Whether a redis-server binary can be started on this machine. */
export const redisAvailable: boolean = spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0

const warned = new Set<string>()

/**
 * Tap options for tests that need `binary` (from Debian's `debianPackage`): skipped with a loud warning when it is missing,
 * except under CI=true, where a missing binary must fail the run.
 */
export function requireBinary (binary: string, available: boolean, tests: string, debianPackage = 'redis-server'): { skip: string | false } {
  if (available) return { skip: false }
  if (process.env.CI === 'true') {
    throw new Error(`${binary} is not installed, and CI=true requires ${tests} to run`)
  }
  if (!warned.has(binary)) {
    warned.add(binary)
    process.stderr.write('\n' + '!'.repeat(78) + '\n' +
      `!!  ${binary} not found: ${tests} are SKIPPED.\n` +
      `!!  Install it (apt-get install -y ${debianPackage}) to run the whole suite.\n` +
      '!'.repeat(78) + '\n\n')
  }
  return { skip: `${binary} is not installed` }
}

/** Options for a tap test that needs a real redis-server. */
export function redisTestOptions (): { skip: string | false } {
  return requireBinary('redis-server', redisAvailable, 'the Redis-backed tests')
}

export async function freePort (host = '127.0.0.1'): Promise<number> {
  const server = createServer()
  server.listen(0, host)
  await once(server, 'listening')
  const address = server.address()
  server.close()
  await once(server, 'close')
  if (address === null || typeof address === 'string') throw new Error('no port')
  return address.port
}

export interface RedisServer {
  readonly port: number
  readonly url: string
  /** Stops the server (SIGKILL, as a crash would). */
  stop(): Promise<void>
  /** Starts it again on the same port, empty. */
  start(): Promise<void>
  /** Freezes it (SIGSTOP): connections stay open, commands wait unanswered. */
  freeze(): void
  /** Lets a frozen server run again (SIGCONT): it then runs what it was sent meanwhile. */
  thaw(): void
}

/**
 * Starts a private, non-persistent redis-server on a free loopback port. Its working folder is
 * its own and goes when it stops: a primary writes an RDB file there for a replica's full sync,
 * and a redis-server loads the one it finds at start, so a shared folder would hand one test's
 * (or benchmark's) data to the next server started in it.
 */
export async function startRedis (extraArgs: string[] = []): Promise<RedisServer> {
  const port = await freePort()
  const dir = join(tmpdir(), `email-otp-redis-${port}-${process.pid}`)
  let child: ChildProcess | null = null

  async function start (): Promise<void> {
    mkdirSync(dir, { recursive: true })
    child = killOnExit(spawn('redis-server', [
      '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--protected-mode', 'no', '--dir', dir, ...extraArgs
    ], { stdio: ['ignore', 'pipe', 'pipe'] }))
    let output = ''
    child.stdout?.on('data', (chunk: Buffer) => { output += chunk.toString() })
    for (let i = 0; i < 100; i++) {
      if (output.includes('Ready to accept connections')) return
      if (child.exitCode !== null) throw new Error(`redis-server exited: ${output}`)
      await sleep(50)
    }
    throw new Error(`redis-server did not start on ${port}: ${output}`)
  }

  async function stop (): Promise<void> {
    const running = child
    child = null
    if (running === null || running.exitCode !== null) return
    const exited = once(running, 'exit')
    running.kill('SIGKILL')
    await exited
    rmSync(dir, { recursive: true, force: true })
  }

  function signal (name: NodeJS.Signals): void {
    if (child === null || !child.kill(name)) throw new Error(`redis-server on ${port} is not running`)
  }

  await start()
  return { port, url: `redis://127.0.0.1:${port}`, stop, start, freeze: () => { signal('SIGSTOP') }, thaw: () => { signal('SIGCONT') } }
}

/**
 * A client with the service's fail-fast options (a command fails instead of queueing while
 * disconnected), once it is ready. Errors are swallowed: the tests assert on rejections.
 */
export async function connectFailFast (url: string): Promise<Redis> {
  const client = new Redis(url, { maxRetriesPerRequest: 1, enableOfflineQueue: false })
  client.on('error', () => {})
  if (client.status !== 'ready') await once(client, 'ready')
  return client
}

/**
 * A redis-server of the test's own and two fail-fast clients on it, which stand for two
 * instances, all stopped when the test ends.
 */
export async function redisWithClients (t: Test): Promise<{ server: RedisServer, client: Redis, other: Redis }> {
  const server = await startRedis()
  const clients: Redis[] = []
  t.teardown(async () => {
    for (const client of clients) client.disconnect()
    await server.stop()
  })
  for (let index = 0; index < 2; index++) clients.push(await connectFailFast(server.url))
  const [client, other] = clients as [Redis, Redis]
  return { server, client, other }
}
