import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { onExit } from 'signal-exit'

const cleanups = new Set<() => void>()
let hooked = false

/**
 * Runs `cleanup` when this test process ends, however it ends: a file that hits tap's timeout
 * is killed with SIGALRM, while a teardown may still be waiting (on a hung socket, say), and
 * process.on('exit') does not run then; signal-exit runs its hooks on that signal as on a
 * normal exit. Returns a function that unregisters it.
 */
export function atExit (cleanup: () => void): () => void {
  if (!hooked) {
    hooked = true
    onExit(() => { for (const run of cleanups) run() })
  }
  cleanups.add(cleanup)
  return () => { cleanups.delete(cleanup) }
}

/**
 * Kills `child` when this test process ends, so no redis-server, emulator or service outlives
 * the file that started it; the test's own teardown stops it in the ordinary case. With
 * `group` (a child spawned `detached`, leading its own process group: npm and what it runs),
 * the whole group, which may outlive its leader.
 */
export function killOnExit<T extends ChildProcess> (child: T, group = false): T {
  const pid = child.pid
  if (pid === undefined) return child
  const forget = atExit(() => {
    try {
      if (group) process.kill(-pid, 'SIGKILL')
      else if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    } catch {
      // Already gone.
    }
  })
  if (!group) child.once('exit', forget)
  return child
}

/** What execForTest rejects with, as execFile's promise does: the exit code (or signal) and the output. */
export interface ExecFailure extends Error { code: number | null, signal: NodeJS.Signals | null, stdout: string, stderr: string }

/**
 * Runs a program a test runs to its end (a CLI, `npm run …`, a shell script) and answers its
 * output, rejecting as execFile's promise does (`code`, `stdout`, `stderr`) when it fails. It
 * runs in a process group of its own, killed whole when the test's process ends, so a file that
 * hits tap's timeout leaves no npm, shell or node behind (execFile ignores `detached`); past
 * `timeoutMs` the group gets SIGTERM.
 */
export async function execForTest (file: string, args: readonly string[], options: { cwd?: string, env?: NodeJS.ProcessEnv, timeout?: number } = {}): Promise<{ stdout: string, stderr: string }> {
  const child = killOnExit(spawn(file, args, { cwd: options.cwd, env: options.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true }), true)
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const timer = options.timeout === undefined ? undefined : setTimeout(() => { signalGroup(child, 'SIGTERM') }, options.timeout)
  try {
    const [code, signal] = await once(child, 'close') as [number | null, NodeJS.Signals | null]
    if (code === 0) return { stdout, stderr }
    const failure: ExecFailure = Object.assign(new Error(`${file} ${args.join(' ')} failed: ${signal ?? `exit ${code}`}\n${stderr}`), { code, signal, stdout, stderr })
    throw failure
  } finally {
    clearTimeout(timer)
  }
}

function signalGroup (child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal)
  } catch {
    // Already gone.
  }
}
