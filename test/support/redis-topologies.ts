import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { atExit, killOnExit } from './processes.js'
import { freePort, redisTestOptions, requireBinary } from './redis.js'

/** Whether redis-cli (which creates clusters) can be run on this machine. */
const redisCliAvailable: boolean = spawnSync('redis-cli', ['--version'], { stdio: 'ignore' }).status === 0

/**
 * Like redisTestOptions, for tests that also need redis-cli: skipped loudly without it, a
 * failure under CI=true. Both binaries come with Debian's redis-server package.
 */
export function topologyTestOptions (): { skip: string | false } {
  const server = redisTestOptions()
  return server.skip !== false ? server : requireBinary('redis-cli', redisCliAvailable, 'the Redis Cluster and Sentinel tests')
}

/** Polls until `check` holds; throws with `what` once `timeoutMs` has passed. */
export async function waitFor (what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await check().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(100)
  }
}

/** Each server's own working directory, removed when the process exits. */
const directories: string[] = []
atExit(() => {
  for (const directory of directories) rmSync(directory, { recursive: true, force: true })
})

export interface Server {
  readonly port: number
  /** SIGKILL, as a crash would. */
  stop(): Promise<void>
  /** Starts it again with the same arguments (a cluster node keeps its nodes file, so its identity). */
  start(): Promise<void>
  /** What the server has logged since it was last started, for failure reports. */
  log(): string
  /** Freezes it (SIGSTOP): connections stay open, nothing is answered or replicated. */
  freeze(): void
  /** Lets a frozen server run again (SIGCONT). */
  thaw(): void
}

/**
 * Starts a private, non-persistent redis-server on `port` (a Sentinel with `sentinelConf`);
 * resolves once its log shows it serving.
 */
async function spawnRedis (port: number, extraArgs: string[], sentinelConf?: string): Promise<Server> {
  const args = [
    ...(sentinelConf === undefined ? [] : [sentinelConf, '--sentinel']),
    '--port', String(port), '--bind', '127.0.0.1', '--protected-mode', 'no',
    ...(sentinelConf === undefined ? ['--save', '', '--appendonly', 'no'] : []),
    ...extraArgs
  ]
  const readyLine = sentinelConf === undefined ? 'Ready to accept connections' : '+monitor master'
  // A directory of its own: a replica writes the snapshot it receives where it runs, and a
  // server loads the snapshot it finds there at start-up (saving is off, loading is not), so
  // a shared one would carry one test's keys into the next server started.
  const directory = mkdtempSync(join(tmpdir(), 'email-otp-redis-'))
  directories.push(directory)
  let child: ChildProcess | null = null
  let output = ''

  async function stop (): Promise<void> {
    const current = child
    child = null
    if (current === null || current.exitCode !== null || current.signalCode !== null) return
    const exited = once(current, 'exit')
    current.kill('SIGKILL')
    await exited
  }

  async function start (): Promise<void> {
    // Killed when the process exits even if a test never reached its teardown.
    const current = killOnExit(spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: directory }))
    child = current
    output = ''
    current.stdout?.on('data', (chunk: Buffer) => { output += chunk.toString() })
    current.stderr?.on('data', (chunk: Buffer) => { output += chunk.toString() })
    const deadline = Date.now() + 10_000
    while (!output.includes(readyLine)) {
      if (current.exitCode !== null || Date.now() > deadline) {
        await stop()
        throw new Error(`redis-server ${args.join(' ')} did not start:\n${output}`)
      }
      await sleep(50)
    }
  }

  function signal (name: NodeJS.Signals): void {
    if (child === null || !child.kill(name)) throw new Error(`redis-server on ${port} is not running`)
  }

  await start()
  return { port, stop, start, log: () => output, freeze: () => { signal('SIGSTOP') }, thaw: () => { signal('SIGCONT') } }
}

type RedisCommand = [string, ...Array<string | number>]

/** Commands run in turn on one plain connection to one server, closed afterwards; their replies. */
export async function askEach (port: number, ...commands: RedisCommand[]): Promise<unknown[]> {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2000, commandTimeout: 2000 })
  client.on('error', () => {})
  try {
    await client.connect()
    const replies: unknown[] = []
    for (const command of commands) replies.push(await client.call(...command))
    return replies
  } finally {
    client.disconnect()
  }
}

/** One command on a plain connection to one server, closed afterwards. */
export async function ask (port: number, ...command: RedisCommand): Promise<unknown> {
  const [reply] = await askEach(port, command)
  return reply
}

function infoField (info: unknown, field: string): string | undefined {
  return typeof info === 'string' ? new RegExp(`^${field}:(.*)\\r?$`, 'm').exec(info)?.[1] : undefined
}

/** One primary of a Cluster, as a node's `CLUSTER NODES` shows it, and its replicas. */
export interface ClusterShard {
  readonly primary: Server
  readonly replicas: Server[]
  /** Inclusive slot ranges. */
  readonly slots: Array<[number, number]>
}

export interface RedisClusterSet {
  readonly servers: Server[]
  /** `127.0.0.1:P1,127.0.0.1:P2,…`, the REDIS_CLUSTER_NODES value. */
  readonly nodes: string
  /** The primaries and their replicas, as a reachable node sees them now (failed nodes left out). */
  shards(): Promise<ClusterShard[]>
  /** The shard serving `key` now. */
  shardOf(key: string): Promise<ClusterShard>
  stop(): Promise<void>
}

export interface ClusterOptions {
  /** Replicas of each of the three primaries (none by default). */
  replicas?: number
  /** More `redis-server` arguments for every node (`--cluster-node-timeout`, say). */
  args?: string[]
}

/**
 * Three primaries (each with `replicas` replicas) on free loopback ports, joined with
 * `redis-cli --cluster create`. Resolves once every node reports `cluster_state:ok` and every
 * replica has synchronised.
 */
export async function startCluster ({ replicas = 0, args = [] }: ClusterOptions = {}): Promise<RedisClusterSet> {
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-cluster-'))
  const servers: Server[] = []
  const stop = async (): Promise<void> => {
    await Promise.all(servers.map(async (server) => { await server.stop() }))
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    const ports: number[] = []
    const taken = new Set<number>()
    // A port just released can be handed out again: each one is taken once.
    const unusedPort = async (): Promise<number> => {
      for (;;) {
        const port = await freePort()
        if (!taken.has(port)) {
          taken.add(port)
          return port
        }
      }
    }
    for (let i = 0; i < 3 * (1 + replicas); i++) {
      const port = await unusedPort()
      // The cluster bus defaults to port + 10000, which can be taken or past 65535.
      const busPort = await unusedPort()
      ports.push(port)
      servers.push(await spawnRedis(port, [
        '--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`),
        '--cluster-port', String(busPort), '--dir', dir, ...args
      ]))
    }
    const addresses = ports.map((port) => `127.0.0.1:${port}`)
    const create = spawnSync('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicas), '--cluster-yes'], { encoding: 'utf8', timeout: 30_000 })
    if (create.status !== 0) throw new Error(`redis-cli --cluster create failed: ${create.stdout}${create.stderr}`)
    await waitFor('cluster_state:ok on every node', 30_000, async () => {
      const states = await Promise.all(ports.map(async (port) => infoField(await ask(port, 'CLUSTER', 'INFO'), 'cluster_state')))
      return states.every((state) => state === 'ok')
    })
    /** The first node that answers: some are down while a test fails one over. */
    const askAny = async (...command: RedisCommand): Promise<unknown> => {
      for (const server of servers) {
        const reply = await ask(server.port, ...command).catch(() => undefined)
        if (reply !== undefined) return reply
      }
      throw new Error(`no Cluster node answers ${command.join(' ')}`)
    }
    const shards = async (): Promise<ClusterShard[]> => {
      const nodes = await askAny('CLUSTER', 'NODES')
      const lines = String(nodes).split('\n').filter((line) => line.trim() !== '')
      const byPort = (address: string): Server | undefined => servers.find((server) => address.startsWith(`127.0.0.1:${server.port}@`))
      const fields = lines.map((line) => line.split(' ')).filter((node) => !/(^|,)(fail|noaddr|handshake)(,|$)/.test(node[2] ?? ''))
      return fields.filter((node) => /(^|,)master(,|$)/.test(node[2] ?? '') && node.length > 8).map((node) => {
        const primary = byPort(node[1] ?? '')
        if (primary === undefined) throw new Error(`a primary the test did not start: ${node.join(' ')}`)
        return {
          primary,
          replicas: fields.filter((replica) => replica[3] === node[0]).map((replica) => byPort(replica[1] ?? '')).filter((server): server is Server => server !== undefined),
          slots: node.slice(8).filter((range) => !range.startsWith('[')).map((range) => {
            const [from, to = from] = range.split('-').map(Number)
            return [from ?? 0, to ?? 0]
          })
        }
      })
    }
    const shardOf = async (key: string): Promise<ClusterShard> => {
      const slot = Number(await askAny('CLUSTER', 'KEYSLOT', key))
      const shard = (await shards()).find((candidate) => candidate.slots.some(([from, to]) => slot >= from && slot <= to))
      if (shard === undefined) throw new Error(`no primary serves slot ${slot} (${key})`)
      return shard
    }
    await waitFor('every replica in sync', 30_000, async () => {
      const found = await shards()
      const links = await Promise.all(found.flatMap((shard) => shard.replicas).map(async (replica) => infoField(await ask(replica.port, 'INFO', 'replication'), 'master_link_status')))
      return found.length === 3 && links.length === 3 * replicas && links.every((link) => link === 'up')
    })
    return { servers, nodes: addresses.join(','), shards, shardOf, stop }
  } catch (error) {
    await stop()
    throw error
  }
}

export interface RedisSentinelSet {
  readonly primary: Server
  readonly replica: Server
  readonly sentinel: Server
  /** `127.0.0.1:S`, the REDIS_SENTINELS value. */
  readonly sentinels: string
  readonly name: string
  /** The port of the server the Sentinel currently names primary. */
  primaryPort(): Promise<number>
  /** Resolves once the replica has every write the primary has taken so far. */
  replicated(): Promise<void>
  stop(): Promise<void>
}

/**
 * A primary, a replica of it and one Sentinel (quorum 1, so it fails over on its own) that
 * declares the primary down after a second. Resolves once the Sentinel knows the replica as a
 * healthy failover candidate.
 */
export async function startSentinelSet (): Promise<RedisSentinelSet> {
  const name = 'mymaster'
  const dir = mkdtempSync(join(tmpdir(), 'email-otp-sentinel-'))
  const servers: Server[] = []
  const stop = async (): Promise<void> => {
    await Promise.all(servers.map(async (server) => { await server.stop() }))
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    const primary = await spawnRedis(await freePort(), [])
    servers.push(primary)
    const replica = await spawnRedis(await freePort(), ['--replicaof', '127.0.0.1', String(primary.port)])
    servers.push(replica)
    await waitFor('the replica to sync', 20_000, async () => infoField(await ask(replica.port, 'INFO', 'replication'), 'master_link_status') === 'up')

    const sentinelPort = await freePort()
    // Sentinel rewrites its configuration file as it learns, so it lives in a directory of its own.
    const conf = join(dir, 'sentinel.conf')
    writeFileSync(conf, [
      `dir ${dir}`,
      `sentinel monitor ${name} 127.0.0.1 ${primary.port} 1`,
      `sentinel down-after-milliseconds ${name} 1000`,
      `sentinel failover-timeout ${name} 3000`,
      ''
    ].join('\n'))
    const sentinel = await spawnRedis(sentinelPort, [], conf)
    servers.push(sentinel)
    await waitFor('the Sentinel to know the replica', 30_000, async () => {
      const replicas = await ask(sentinelPort, 'SENTINEL', 'REPLICAS', name)
      return Array.isArray(replicas) && replicas.some((entry) => {
        const fields = Array.isArray(entry) ? entry.map(String) : []
        const flags = fields[fields.indexOf('flags') + 1] ?? ''
        const link = fields[fields.indexOf('master-link-status') + 1]
        return fields[fields.indexOf('port') + 1] === String(replica.port) && flags === 'slave' && link === 'ok'
      })
    })
    const primaryPort = async (): Promise<number> => {
      const address = await ask(sentinelPort, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)
      return Array.isArray(address) ? Number(address[1]) : 0
    }
    const replicated = async (): Promise<void> => {
      await waitFor('the replica to catch up', 10_000, async () => {
        const [primaryInfo, replicaInfo] = await Promise.all([ask(primary.port, 'INFO', 'replication'), ask(replica.port, 'INFO', 'replication')])
        const offset = infoField(primaryInfo, 'master_repl_offset')
        return offset !== undefined && infoField(replicaInfo, 'slave_repl_offset') === offset
      })
    }
    return { primary, replica, sentinel, sentinels: `127.0.0.1:${sentinelPort}`, name, primaryPort, replicated, stop }
  } catch (error) {
    await stop()
    throw error
  }
}
