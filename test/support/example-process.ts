import type { ChildProcess } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { freePort } from './redis.js'
import { spawnForTest } from './service-process.js'

export interface RunningExample {
  child: ChildProcess
  base: string
  output: () => string
  /** Resolves once the process has printed a line matching `pattern` (output arrives through a pipe, later than answers). */
  waitFor: (pattern: RegExp) => Promise<void>
}

/**
 * Runs one of the examples as docs/examples.md says (node, through tsx for TypeScript) on a free
 * loopback port, once it answers HTTP; killed when the test ends.
 */
export async function startExample (t: Test, script: string, env: Record<string, string>, port?: number): Promise<RunningExample> {
  const listen = port ?? await freePort()
  const path = new URL(`../../examples/${script}`, import.meta.url).pathname
  const args = script.endsWith('.ts') ? ['--import', 'tsx', path] : [path]
  const { child, output } = spawnForTest(t, args, { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: String(listen), ...env })
  const base = `http://127.0.0.1:${listen}`
  // Generous: tsx compiles on start, on a shared 2-core machine.
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`${script} exited: ${output()}`)
    if (i >= 600) throw new Error(`${script} did not answer: ${output()}`)
    if (await fetch(base).then(() => true, () => false)) break
    await sleep(100)
  }
  const waitFor = async (pattern: RegExp): Promise<void> => {
    for (let i = 0; i < 600; i++) {
      if (pattern.test(output())) return
      await sleep(50)
    }
    throw new Error(`${script} never printed ${String(pattern)}: ${output()}`)
  }
  return { child, base, output, waitFor }
}
