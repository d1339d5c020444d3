import type { ChildProcess } from 'node:child_process'
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
