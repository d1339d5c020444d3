/*
 * `npm start` as a newcomer runs it: npm is the process a person sees, and npm forwards
 * neither SIGHUP nor SIGTERM. The service names its own PID in a log line; signals sent there
 * reload and stop it, and npm ends with it. The project is built once, into the test's own
 * folder (npm start's prestart would build into dist/).
 */
import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { copyFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { writeTenants } from '../helper.js'
import { killOnExit } from '../support/processes.js'
import { freePort } from '../support/redis.js'
import { until } from '../support/wait.js'

const exec = promisify(execFile)
// The build below is the whole project's: on a loaded 2-core machine it alone outlasts tap's 180 s.
t.setTimeout(600_000)
const root = new URL('../..', import.meta.url).pathname

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

t.test('npm start: the logged PID takes SIGHUP (reload) and SIGTERM (stop); npm ends with the service', async (t) => {
  const dir = t.testdir({})
  copyFileSync(join(root, 'package.json'), join(dir, 'package.json'))
  await exec(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', join(dir, 'dist')], { cwd: root, timeout: 480_000 })
  const { path } = writeTenants(t)
  const port = await freePort()
  // --ignore-scripts skips prestart (the build above stands in for it), not start itself.
  const npm = killOnExit(spawn('npm', ['start', '--ignore-scripts'], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: String(port), TENANTS_FILE: path },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true
  }), true)
  let output = ''
  npm.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  npm.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const exited = once(npm, 'exit')
  t.teardown(() => { if (npm.exitCode === null) process.kill(-(npm.pid ?? 0), 'SIGKILL') })

  await until('the line naming the PID', () => /signals go to pid \d+/.test(output), 60_000)
  const pid = Number(/signals go to pid (\d+)/.exec(output)?.[1])
  const line = JSON.parse(output.split('\n').find((entry) => entry.includes('signals go to pid')) ?? '{}') as { pid?: number, msg?: string }
  t.equal(line.pid, pid, 'the pid field of every log line is the same process')
  t.not(pid, npm.pid, 'not npm\'s PID')

  const mark = output.length
  process.kill(pid, 'SIGHUP')
  await until('the reload line', () => /tenants file reloaded/.test(output.slice(mark)), 30_000)
  t.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200, 'still serving after the reload')
  t.equal(npm.exitCode, null, 'npm still running')

  process.kill(pid, 'SIGTERM')
  const [code] = await exited as [number | null]
  t.equal(code, 0, 'npm ends when the service stops')
  t.match(output, /draining: \/readyz answers 503[^\n]*\n(.*\n)*.*shutting down: closing the listeners/, 'the drain, then the close')
  t.notOk(alive(pid), 'no process left behind')
})
