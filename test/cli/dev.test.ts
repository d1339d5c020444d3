/*
 * `npm run dev` is for people: readable log lines. `npm start` keeps JSON (one object per line),
 * which test/server/ covers through the same server.ts.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import t from 'tap'
import { killOnExit } from '../support/processes.js'
import { freePort } from '../support/redis.js'
import { until } from '../support/wait.js'

t.test('npm run dev serves from the sources and pretty-prints its logs', async (t) => {
  const port = await freePort()
  const child = killOnExit(spawn('npm', ['run', '-s', 'dev'], {
    cwd: new URL('../..', import.meta.url).pathname,
    env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', TENANTS_FILE: '', REDIS_URL: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true
  }), true)
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  t.teardown(async () => {
    if (child.exitCode !== null) return
    const exited = once(child, 'exit')
    process.kill(-(child.pid ?? 0), 'SIGKILL')
    await exited
  })
  await until('the listening line', () => /Server listening/.test(output), 60_000)
  t.match(output, /^\[\d{2}:\d{2}:\d{2}\.\d{3}\] INFO \(\d+\): Server listening at http:\/\/127\.0\.0\.1:\d+$/m, 'a readable line, not JSON')
  t.notMatch(output, /^\{"level"/m, 'no JSON lines')
  const health = await fetch(`http://127.0.0.1:${port}/healthz`)
  t.equal(health.status, 200)
})
