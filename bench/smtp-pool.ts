/*
 * nodemailer's pool against a real smtp-server sink (bench/smtp-sink.ts, its own process):
 * for each pool setting (two rounds; the first also warms up), 4,000 messages of the service's size, 50 in flight (the main bench's
 * connections), and the sender's CPU per message and latency. `npm run bench:smtp-pool`.
 */
import { fileURLToPath } from 'node:url'
import { createTransport } from 'nodemailer'
import { freePort } from '../test/support/redis.js'
import { BASE_ENV, ROOT } from './support/service.js'
import { Resources, startNodeChild } from './support/children.js'

const MESSAGES = 4000
const IN_FLIGHT = 50
const SETTINGS = [
  { maxConnections: 5, maxMessages: 100 },
  { maxConnections: 5, maxMessages: Infinity },
  { maxConnections: 10, maxMessages: 100 },
  { maxConnections: 20, maxMessages: 100 },
  { maxConnections: 50, maxMessages: 100 }
]

const text = 'Your code is 123456.\n\nIt expires in 10 minutes. If you did not ask for it, ignore this message.\n'
const html = `<!DOCTYPE html><html><body><p>Your code is <b>123456</b>.</p><p>It expires in 10 minutes.</p>${'<p>&nbsp;</p>'.repeat(20)}</body></html>`

const resources = new Resources()
try {
  const port = await freePort()
  const sink = await startNodeChild({ name: 'SMTP sink', args: [fileURLToPath(new URL('./smtp-sink.js', import.meta.url))], cwd: ROOT, env: { ...BASE_ENV, PORT: String(port) }, port, stdout: 'ignore', readyPath: null })
  resources.add(sink.stop)
  process.stdout.write('maxConnections  maxMessages  msg/s  p50 ms  p99 ms  cpu µs/msg\n')
  // Twice over: the first round also warms the JIT, so read the second.
  for (const setting of [...SETTINGS, ...SETTINGS]) {
    const transporter = createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, pool: true, ...setting, logger: false })
    const latencies: number[] = []
    let next = 0
    const send = async (): Promise<void> => {
      while (next++ < MESSAGES) {
        const started = performance.now()
        await transporter.sendMail({ from: 'Bench <no-reply@bench.example>', to: `user${next}@example.com`, subject: 'Your code', text, html })
        latencies.push(performance.now() - started)
      }
    }
    // A warm-up opens the pool's connections.
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => { await transporter.sendMail({ from: 'b@bench.example', to: 'w@example.com', subject: 'warm', text }) }))
    const cpuBefore = process.cpuUsage()
    const started = performance.now()
    await Promise.all(Array.from({ length: IN_FLIGHT }, send))
    const seconds = (performance.now() - started) / 1000
    const cpu = process.cpuUsage(cpuBefore)
    transporter.close()
    latencies.sort((a, b) => a - b)
    const at = (fraction: number): number => latencies[Math.min(latencies.length - 1, Math.ceil(fraction * latencies.length) - 1)] ?? Number.NaN
    process.stdout.write(`${String(setting.maxConnections).padStart(14)}  ${String(setting.maxMessages).padStart(11)}  ${(latencies.length / seconds).toFixed(0).padStart(5)}  ${at(0.5).toFixed(1).padStart(6)}  ${at(0.99).toFixed(1).padStart(6)}  ${((cpu.user + cpu.system) / latencies.length).toFixed(0).padStart(10)}\n`)
  }
} finally {
  await resources.close()
}
