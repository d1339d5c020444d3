/*
 * What tracing costs a dispatch. The built service (dist/server.js; live mail through the log
 * transport, written to a file) runs three times, each a fresh process on the same tenants
 * file: tracing off (no OTEL_* variable), on with every trace sampled, and on with 1% of new
 * traces sampled; each exports over OTLP/HTTP (protobuf) to a collector in this process that
 * reads and discards what it gets. Each run: a warm-up, then a timed load of dispatches, each
 * to a new address; throughput, latency, the service's CPU per answer and the spans received.
 *
 *   npm run bench:tracing [-- --seconds 10 --connections 20 --redis]
 *
 * `--redis` puts the service on a private redis-server (every Redis command a span).
 */
import { createServer } from 'node:http'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import type { AddressInfo } from 'node:net'
import { startRedis } from '../test/support/redis.js'
import { Resources, cpuSeconds } from './support/children.js'
import { runLoad } from './support/load.js'
import { benchTenant, dispatchRequest, startService } from './support/service.js'

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    connections: { type: 'string', default: '20' },
    redis: { type: 'boolean', default: false }
  }
})
const seconds = Number(values.seconds)
const connections = Number(values.connections)

/** A collector that answers every export 200 and counts what arrived. */
async function startCollector (resources: Resources): Promise<{ url: string, exports: () => number, bytes: () => number }> {
  let exports = 0
  let bytes = 0
  const server = createServer((request, response) => {
    request.on('data', (chunk: Buffer) => { bytes += chunk.length })
    request.on('end', () => {
      exports++
      response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  resources.add(async () => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, exports: () => exports, bytes: () => bytes }
}

interface Mode {
  name: string
  env: Record<string, string>
}

const resources = new Resources()
const dir = mkdtempSync(join(tmpdir(), 'email-otp-bench-tracing-'))
resources.add(async () => { rmSync(dir, { recursive: true, force: true }) })

try {
  const collector = await startCollector(resources)
  const tenant = benchTenant(dir)
  const redis = values.redis === true ? await startRedis() : null
  if (redis !== null) resources.add(redis.stop)
  const tracing = { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' }
  const modes: Mode[] = [
    { name: 'tracing off', env: {} },
    { name: 'on, 100%', env: { ...tracing, OTEL_TRACES_SAMPLER: 'parentbased_always_on' } },
    { name: 'on, 1%', env: { ...tracing, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' } }
  ]
  const rows: string[][] = []
  for (const mode of modes) {
    const service = await startService(resources, {
      name: mode.name,
      dir,
      env: { ...tenant.env, ...(redis === null ? {} : { REDIS_URL: redis.url }), ...mode.env }
    })
    const load = { url: service.child.url, path: '/otp/request', headers: { authorization: `Bearer ${tenant.liveKey}` }, connections, next: dispatchRequest }
    await runLoad({ ...load, seconds: 2 })
    const cpuBefore = cpuSeconds(service.child.pid)
    const bytesBefore = collector.bytes()
    const result = await runLoad({ ...load, seconds })
    const cpuAfter = cpuSeconds(service.child.pid)
    // Stopping flushes the spans still queued.
    await service.child.stop()
    const cpuMicros = cpuBefore === null || cpuAfter === null ? null : (cpuAfter - cpuBefore) * 1e6 / result.requests
    rows.push([
      mode.name,
      result.rps.toFixed(0),
      result.p50.toFixed(2),
      result.p99.toFixed(2),
      cpuMicros === null ? '-' : cpuMicros.toFixed(0),
      ((collector.bytes() - bytesBefore) / result.requests).toFixed(0),
      String(result.unexpected + result.errors)
    ])
  }
  const header = ['mode', 'req/s', 'p50 ms', 'p99 ms', 'cpu µs/req', 'OTLP bytes/req', 'failed']
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)))
  const line = (cells: string[]): string => cells.map((cell, column) => cell.padEnd(widths[column] ?? 0)).join('  ')
  process.stdout.write(`dispatch, ${redis === null ? 'embedded store' : 'Redis'}, log transport, ${connections} connections, ${seconds} s per mode, Node ${process.versions.node}\n`)
  process.stdout.write(`${line(header)}\n${rows.map(line).join('\n')}\n`)
} finally {
  await resources.close()
}
