import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'

export interface NodeChildOptions {
  name: string
  /** Arguments of the node binary running this script: flags, then the script. */
  args: string[]
  cwd: string
  /** The whole environment: nothing is inherited, so a REDIS_URL in the shell cannot leak in. */
  env: Record<string, string>
  port: number
  /** Where stdout goes: 'ignore' (a null sink) or an open file descriptor. */
  stdout: 'ignore' | number
  /** Polled until it answers; any HTTP answer counts unless `readyStatus` is given. Null: ready once the port accepts a TCP connection (a mail sink). */
  readyPath: string | null
  readyStatus?: number
}

export interface NodeChild {
  readonly name: string
  readonly url: string
  readonly pid: number
  /** SIGTERM, then SIGKILL if the process has not exited within five seconds. */
  stop (): Promise<void>
}

const START_TIMEOUT_MS = 20_000
const STOP_TIMEOUT_MS = 5_000

// Last resort for an exit that skips the orderly stop (an uncaught exception): kill() is
// synchronous, so it still works from an 'exit' listener.
const running = new Set<ChildProcess>()
process.on('exit', () => { for (const child of running) child.kill('SIGKILL') })
// Ctrl-C reaches the whole process group: children then exit on their own, as expected.
let interrupted = false

/** Starts a node script on a loopback port and waits until it answers HTTP. */
export async function startNodeChild (options: NodeChildOptions): Promise<NodeChild> {
  const child = spawn(process.execPath, options.args, { cwd: options.cwd, env: options.env, stdio: ['ignore', options.stdout, 'pipe'] })
  running.add(child)
  // Kept for the error message when the process fails (a configuration line names the problem).
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-4000) })
  let ready = false
  let stopping = false
  child.once('exit', (code, signal) => {
    running.delete(child)
    // A target that dies under load leaves only connection errors in the figures: say why.
    if (ready && !stopping && !interrupted) process.stderr.write(`${options.name} exited during the run (${signal ?? `code ${code}`}): ${stderr.trim()}\n`)
  })

  async function stop (): Promise<void> {
    stopping = true
    if (child.exitCode !== null || child.signalCode !== null) return
    const exited = once(child, 'exit')
    child.kill('SIGTERM')
    const timer = setTimeout(() => { child.kill('SIGKILL') }, STOP_TIMEOUT_MS)
    await exited
    clearTimeout(timer)
  }

  const url = `http://127.0.0.1:${options.port}`
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${options.name} exited during start-up: ${stderr.trim() || `code ${child.exitCode ?? child.signalCode}`}`)
    }
    try {
      if (options.readyPath === null) {
        await accepts(options.port)
        break
      }
      const response = await fetch(url + options.readyPath)
      await response.arrayBuffer()
      if (options.readyStatus === undefined || response.status === options.readyStatus) break
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      await stop()
      throw new Error(`${options.name} was not ready within ${START_TIMEOUT_MS / 1000} s: ${stderr.trim()}`)
    }
    await sleep(50)
  }
  ready = true
  return { name: options.name, url, pid: child.pid as number, stop }
}

async function accepts (port: number): Promise<void> {
  const socket = connect(port, '127.0.0.1')
  try {
    await once(socket, 'connect')
  } finally {
    socket.destroy()
  }
}

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100

/**
 * CPU seconds (user + system, all threads) a process has used so far, from /proc: what a
 * target spends per request whatever else the machine runs. Null where /proc is missing.
 */
export function cpuSeconds (pid: number): number | null {
  let stat: string
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  } catch {
    return null
  }
  // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}

/**
 * Everything a script started, stopped in reverse order exactly once: on success, on error,
 * on an exception thrown outside the script's promise chain (inside a load generator
 * callback, say) and on Ctrl-C or SIGTERM.
 */
export class Resources {
  readonly #stops: Array<() => Promise<void>> = []
  #closing: Promise<void> | null = null

  constructor () {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      process.once(signal, () => {
        interrupted = true
        process.stderr.write(`\n${signal}: stopping child processes\n`)
        void this.close().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143))
      })
    }
    process.once('uncaughtException', (error) => {
      process.stderr.write(`${error.stack ?? error.message}\nstopping child processes\n`)
      void this.close().finally(() => process.exit(1))
    })
  }

  add (stop: () => Promise<void>): void {
    this.#stops.push(stop)
  }

  async close (): Promise<void> {
    this.#closing ??= (async () => {
      for (const stop of this.#stops.reverse()) {
        await stop().catch((error: unknown) => { process.stderr.write(`cleanup: ${String(error)}\n`) })
      }
    })()
    await this.#closing
  }
}

/**
 * A benchmark's entry: runs `main` with the resources it starts, and stops them all however it
 * ends; a failure is printed (as `<what> failed: …`) and sets the exit code.
 */
export async function runWithResources (main: (resources: Resources) => Promise<void>, what = 'bench', resources = new Resources()): Promise<void> {
  try {
    await main(resources)
  } catch (error) {
    process.stderr.write(`${what} failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
    process.exitCode = 1
  } finally {
    await resources.close()
  }
}
