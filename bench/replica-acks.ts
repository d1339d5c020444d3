/*
 * What REDIS_REPLICA_ACKS=1 costs on a Redis Cluster: three primaries with two replicas each
 * (nine redis-server processes on loopback), the service in this process (Fastify's inject: the
 * whole request path but the socket), one tenant, the mailbox cap on (its count lives on a
 * primary of its own for most mailboxes, so a dispatch waits on one or two primaries). Each
 * round measures REDIS_REPLICA_ACKS=0 and 1 (in turn first), each on a fresh instance: a
 * dispatch then a verify of its code, one after the other, `--pairs` times (median and p99 of
 * each), then dispatches from `--connections` concurrent callers for `--seconds` (answers a
 * second). The last lines are each column's median over the rounds.
 *
 *   npm run bench:replica-acks [-- --pairs 300 --connections 32 --seconds 5 --rounds 2]
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import Fastify from 'fastify'
import app, { serverOptions } from '../app.js'
import { parseConfig } from '../lib/config/from-env.js'
import { Capture, MailCapture } from '../test/helper.js'
import { startCluster } from '../test/support/redis-topologies.js'
import { until } from '../test/support/wait.js'
import { benchTenant, nextAddress } from './support/service.js'

const { values } = parseArgs({
  options: {
    pairs: { type: 'string', default: '300' },
    connections: { type: 'string', default: '32' },
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '2' }
  }
})
const pairs = Number(values.pairs)
const connections = Number(values.connections)
const seconds = Number(values.seconds)
const rounds = Number(values.rounds)

function percentile (sorted: readonly number[], fraction: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? 0
}

async function measure (env: Record<string, string>, liveKey: string): Promise<string[]> {
  const config = parseConfig(env)
  const mail = new MailCapture()
  const fastify = Fastify(serverOptions(config, new Capture()))
  await fastify.register(app, { config, mailLog: mail })
  try {
    await fastify.ready()
    await until('the service connected to the Cluster', () => fastify.redis?.status === 'ready')
    const headers = { authorization: `Bearer ${liveKey}` }
    const dispatch = async (email: string) => await fastify.inject({ method: 'POST', url: '/otp/request', headers, payload: { email } })
    const timings = { dispatch: [] as number[], verify: [] as number[] }
    for (let i = 0; i < pairs + 20; i++) {
      const email = nextAddress()
      let started = performance.now()
      const sent = await dispatch(email)
      const dispatchMs = performance.now() - started
      if (sent.statusCode !== 200) throw new Error(`dispatch answered ${sent.statusCode}`)
      const payload = { requestId: sent.json().data.requestId, userGuess: mail.codeFor(email) }
      started = performance.now()
      const checked = await fastify.inject({ method: 'POST', url: '/otp/verify', headers, payload })
      const verifyMs = performance.now() - started
      if (checked.statusCode !== 200) throw new Error(`verify answered ${checked.statusCode}`)
      // The first ones warm the scripts, the connections and the code paths up.
      if (i >= 20) {
        timings.dispatch.push(dispatchMs)
        timings.verify.push(verifyMs)
      }
    }
    const answered = { ok: 0, other: 0 }
    const end = performance.now() + seconds * 1000
    await Promise.all(Array.from({ length: connections }, async () => {
      while (performance.now() < end) {
        const answer = await dispatch(nextAddress())
        answered[answer.statusCode === 200 ? 'ok' : 'other']++
      }
    }))
    const dispatchSorted = timings.dispatch.sort((a, b) => a - b)
    const verifySorted = timings.verify.sort((a, b) => a - b)
    return [
      env.REDIS_REPLICA_ACKS ?? '0',
      percentile(dispatchSorted, 0.5).toFixed(2), percentile(dispatchSorted, 0.99).toFixed(2),
      percentile(verifySorted, 0.5).toFixed(2), percentile(verifySorted, 0.99).toFixed(2),
      (answered.ok / seconds).toFixed(0), String(answered.other)
    ]
  } finally {
    await fastify.close()
  }
}

const dir = mkdtempSync(join(tmpdir(), 'email-otp-bench-acks-'))
const cluster = await startCluster({ replicas: 2 })
try {
  const tenant = benchTenant(dir)
  const env = { ...tenant.env, REDIS_CLUSTER_NODES: cluster.nodes, LOG_LEVEL: 'error' }
  const rows: string[][] = []
  for (let round = 0; round < rounds; round++) {
    for (const acks of round % 2 === 0 ? ['0', '1'] : ['1', '0']) rows.push(await measure({ ...env, REDIS_REPLICA_ACKS: acks }, tenant.liveKey))
  }
  for (const acks of ['0', '1']) {
    const mine = rows.filter((row) => row[0] === acks)
    rows.push([`${acks} (median)`, ...Array.from({ length: 6 }, (_, column) => {
      const values = mine.map((row) => Number(row[column + 1])).sort((a, b) => a - b)
      return String(percentile(values, 0.5))
    })])
  }
  const header = ['REDIS_REPLICA_ACKS', 'dispatch p50 ms', 'p99', 'verify p50 ms', 'p99', `dispatches/s (${connections} callers)`, 'not 200']
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)))
  const line = (cells: string[]): string => cells.map((cell, column) => cell.padEnd(widths[column] ?? 0)).join('  ')
  process.stdout.write(`Redis Cluster, 3 primaries × 2 replicas on loopback; in process (inject), log transport; ${pairs} sequential pairs, then ${connections} concurrent callers for ${seconds} s; Node ${process.versions.node}\n`)
  process.stdout.write(`${line(header)}\n${rows.map(line).join('\n')}\n`)
} finally {
  await cluster.stop()
  rmSync(dir, { recursive: true, force: true })
}
