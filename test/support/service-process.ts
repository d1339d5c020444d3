import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { testEnv } from '../helper.js'
import { killOnExit } from './processes.js'
import { freePort } from './redis.js'

/**
 * The service's entry point, run from its sources through tsx (esbuild: about a second to
 * start, where the test runner's own TypeScript loader takes tens of seconds on a busy
 * 2-core machine). `npm test` only type-checks; nothing is built into dist/ for the tests.
 */
export const serverArgs: readonly string[] = ['--import', 'tsx', new URL('../../server.ts', import.meta.url).pathname]

export interface Running {
  child: ChildProcess
  base: string
  output: () => string
  waitFor: (pattern: RegExp, from?: number) => Promise<void>
}

/** A child process whose output is collected, killed when the test ends if still running. */
export function spawnForTest (t: Test, args: readonly string[], env: Record<string, string>): { child: ChildProcess, output: () => string } {
  const child = killOnExit(spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] }))
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = once(child, 'exit')
      child.kill('SIGKILL')
      await exited
    }
  })
  return { child, output: () => output }
}

/** Generous: a refusal comes after the configuration is read, in a second or two on a quiet machine. */
const REFUSAL_WAIT_MS = 60_000

/** Starts the service with `env` alone, expecting it to refuse to start: its exit code and stderr. */
export async function refusedStart (env: Record<string, string>): Promise<{ exitCode: number | null, stderr: string }> {
  const child = killOnExit(spawn(process.execPath, serverArgs, { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] }))
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const exited = once(child, 'exit') as Promise<[number | null]>
  // A service that starts instead of refusing would otherwise hold the test until tap's timeout.
  const started = sleep(REFUSAL_WAIT_MS, 'started' as const, { ref: false })
  const outcome = await Promise.race([exited, started])
  if (outcome === 'started') {
    child.kill('SIGKILL')
    await exited
    throw new Error(`the service did not refuse to start within ${REFUSAL_WAIT_MS} ms: ${stderr}`)
  }
  return { exitCode: outcome[0], stderr }
}

/** Runs the service as a real process on a free loopback port. */
export async function startServer (t: Test, env: Record<string, string>): Promise<Running> {
  const port = await freePort()
  // No drain unless a test asks for one (test/server/drain.test.ts): nothing routes by readiness here.
  const { child, output: collected } = spawnForTest(t, serverArgs, { PATH: process.env.PATH ?? '', PORT: String(port), HOST: '127.0.0.1', SHUTDOWN_DRAIN_MS: '0', ...testEnv(env) })
  const waitFor = async (pattern: RegExp, from = 0): Promise<void> => {
    // Generous: the process compiles TypeScript on start, on a shared 2-core machine.
    for (let i = 0; i < 600; i++) {
      if (pattern.test(collected().slice(from))) return
      if (child.exitCode !== null) throw new Error(`server exited: ${collected()}`)
      await sleep(50)
    }
    throw new Error(`timed out waiting for ${String(pattern)}: ${collected()}`)
  }
  const base = `http://127.0.0.1:${port}`
  // Polled rather than read from the log, which LOG_LEVEL may silence.
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`server exited: ${collected()}`)
    if (i >= 600) throw new Error(`server did not answer /healthz: ${collected()}`)
    if (await fetch(`${base}/healthz`).then((response) => response.ok, () => false)) break
    await sleep(100)
  }
  return { child, base, output: collected, waitFor }
}

/** A JSON POST with a key, over the network. */
export async function post (base: string, path: string, key: string, body: unknown): Promise<{ status: number, body: any }> {
  const response = await fetch(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body)
  })
  return { status: response.status, body: await response.json() }
}
