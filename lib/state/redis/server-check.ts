import { Cluster, Redis } from 'ioredis'
import type { RedisNode, RedisTopology } from './topology.js'
import type { RedisClient } from './client.js'
import { KeptReading, NodeReplies, nodeId } from './readiness-reads.js'

/** Where the service reports what it found: pino's logger. */
export interface ServerCheckLog {
  warn (fields: object, message: string): void
  info (fields: object, message: string): void
}

/** A setting that names the wrong kind of server: refused at start, not ready later. */
export interface MisnamedServer {
  /** The setting to fix: REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES. */
  variable: string
  problem: string
}

/** What the servers the service writes to are, against what the settings expect of them. */
export interface ServerVerdict {
  /** The setting names a server that cannot take the service's writes (a replica, a Cluster node for REDIS_URL…). */
  misnamed: MisnamedServer | null
  /** What the servers allow but works against the service (too few replicas for REDIS_REPLICA_ACKS, full coverage on a Cluster). */
  warnings: string[]
  /** The fewest replicas connected to a primary, against REDIS_REPLICA_ACKS (null when none are asked for or none was read). */
  replicas: { required: number, connected: number } | null
}

/** How long one reading stands, so that readiness probes stay cheap. */
const DEFAULT_CACHE_MS = 5000

const NOTHING_KNOWN: ServerVerdict = { misnamed: null, warnings: [], replicas: null }

/** One `field:value` line of INFO's text. */
export function infoField (info: string, field: string): string | null {
  return new RegExp(`^${field}:(\\S+)`, 'm').exec(info)?.[1] ?? null
}

const variableOf = { single: 'REDIS_URL', sentinel: 'REDIS_SENTINELS', cluster: 'REDIS_CLUSTER_NODES' } as const

/**
 * The server's own account of what it is (INFO: `redis_mode`, `role`, `cluster_enabled`), for
 * REDIS_URL or the primary the Sentinels name: a Cluster node answers CROSSSLOT to the scripts,
 * a replica READONLY to every write, a Sentinel knows no data commands. Each would leave an
 * instance that answers 503 to every dispatch while it looks healthy.
 */
export function misnamedPrimary (kind: 'single' | 'sentinel', info: string): MisnamedServer | null {
  const variable = variableOf[kind]
  const what = kind === 'single' ? 'names' : 'lead to a primary that is'
  if (infoField(info, 'redis_mode') === 'sentinel') {
    return { variable, problem: `${what} a Redis Sentinel, which stores nothing: set REDIS_SENTINELS and REDIS_SENTINEL_NAME instead` }
  }
  if (infoField(info, 'redis_mode') === 'cluster' || infoField(info, 'cluster_enabled') === '1') {
    return { variable, problem: `${what} a Redis Cluster node (cluster_enabled:1), where every dispatch fails (CROSSSLOT): name the Cluster's nodes in REDIS_CLUSTER_NODES instead` }
  }
  if (infoField(info, 'role') === 'slave') {
    return { variable, problem: `${what} a read-only replica (role:slave), which refuses every write (READONLY): name the primary${kind === 'single' ? ', or use REDIS_SENTINELS to follow failovers' : ''}` }
  }
  return null
}

/** What a node listed in REDIS_SENTINELS or REDIS_CLUSTER_NODES says it is, when that is not what the setting needs. */
export function misnamedListedNode (kind: 'sentinel' | 'cluster', node: RedisNode, info: string): MisnamedServer | null {
  const mode = infoField(info, 'redis_mode') ?? 'standalone'
  const at = `${node.host}:${node.port}`
  if (kind === 'sentinel' && mode !== 'sentinel') {
    return { variable: 'REDIS_SENTINELS', problem: `names ${at}, which is not a Sentinel (redis_mode:${mode}): list the Sentinels' addresses (port 26379 by default)${mode === 'cluster' ? ', or REDIS_CLUSTER_NODES for a Cluster' : ', or use REDIS_URL for one server'}` }
  }
  if (kind === 'cluster' && mode !== 'cluster') {
    return { variable: 'REDIS_CLUSTER_NODES', problem: `names ${at}, which is not a Cluster node (redis_mode:${mode}): ${mode === 'sentinel' ? 'use REDIS_SENTINELS and REDIS_SENTINEL_NAME for Sentinels' : 'use REDIS_URL for one server'}` }
  }
  return null
}

/**
 * Reads what the Redis servers are (INFO on every primary, CONFIG GET on a Cluster's) and keeps
 * the reading for a few seconds; a primary silent past READINESS_READ_MS counts with its last
 * reply. A setting that names the wrong kind of server (a replica, a Cluster node for
 * REDIS_URL, a plain server for REDIS_SENTINELS or REDIS_CLUSTER_NODES) is reported as
 * `misnamed`: refused at start, not ready later (a server demoted by a failover).
 * Fewer replicas than REDIS_REPLICA_ACKS and a Cluster's `cluster-require-full-coverage yes`
 * are warnings, logged when first seen and when they change.
 */
export class RedisServerWatch {
  readonly #client: RedisClient
  readonly #topology: RedisTopology | null
  readonly #requiredAcks: number
  readonly #connectTimeoutMs: number
  readonly #log: ServerCheckLog
  readonly #reading: KeptReading<ServerVerdict>
  readonly #infos = new NodeReplies<string>()
  readonly #coverage = new NodeReplies<unknown>()
  #logged = ''

  /** `topology` null: what the client shows (a tool's client), nothing probed beside it. */
  constructor (client: RedisClient, options: { topology: RedisTopology | null, requiredAcks: number, connectTimeoutMs: number, log: ServerCheckLog, cacheMs?: number }) {
    this.#client = client
    this.#topology = options.topology
    this.#requiredAcks = options.requiredAcks
    this.#connectTimeoutMs = options.connectTimeoutMs
    this.#log = options.log
    this.#reading = new KeptReading(async () => ({ value: await this.#read(), keep: true }), options.cacheMs ?? DEFAULT_CACHE_MS)
  }

  async check (): Promise<ServerVerdict> {
    return await this.#reading.get()
  }

  async #read (): Promise<ServerVerdict> {
    const verdict = this.#client.status === 'ready' ? await this.#readPrimaries() : await this.#probeListedNodes()
    const summary = [verdict.misnamed === null ? '' : `${verdict.misnamed.variable} ${verdict.misnamed.problem}`, ...verdict.warnings].join('\n')
    if (summary !== this.#logged) {
      if (summary === '') this.#log.info({}, 'the Redis servers are what the settings expect again')
      if (verdict.misnamed !== null) this.#log.warn({ setting: verdict.misnamed.variable }, `${verdict.misnamed.variable} ${verdict.misnamed.problem}`)
      for (const warning of verdict.warnings) this.#log.warn({ replicas: verdict.replicas }, warning)
      this.#logged = summary
    }
    return verdict
  }

  async #readPrimaries (): Promise<ServerVerdict> {
    const client = this.#client
    const cluster = client instanceof Cluster
    const primaries = cluster ? client.nodes('master') : [client]
    // A primary that does not answer in time counts with its last INFO (none: it is left out).
    const readings = await Promise.all(primaries.map(async (primary) => await this.#infos.read(nodeId(primary), async () => await primary.info())))
    const infos = readings.flatMap((reading, index) => reading?.ok === true ? [{ info: reading.value, primary: primaries[index] }] : [])
    if (infos.length === 0) return NOTHING_KNOWN
    const warnings: string[] = []
    if (!cluster) {
      const misnamed = misnamedPrimary(this.#topology?.kind === 'sentinel' ? 'sentinel' : 'single', infos[0]?.info ?? '')
      if (misnamed !== null) return { misnamed, warnings, replicas: null }
    }
    let replicas: ServerVerdict['replicas'] = null
    if (this.#requiredAcks > 0) {
      const counted = infos.map(({ info, primary }) => ({ connected: Number(infoField(info, 'connected_slaves') ?? 0), at: `${primary?.options.host ?? ''}:${primary?.options.port ?? ''}` }))
      const fewest = counted.reduce((least, next) => next.connected < least.connected ? next : least)
      replicas = { required: this.#requiredAcks, connected: fewest.connected }
      if (fewest.connected < this.#requiredAcks) {
        warnings.push(`REDIS_REPLICA_ACKS is ${this.#requiredAcks} but the Redis primary ${cluster ? `at ${fewest.at} ` : ''}has ${fewest.connected} connected replica${fewest.connected === 1 ? '' : 's'}: every dispatch and verify it serves is undone and answers 503 until enough replicas are connected`)
      }
    }
    if (cluster) {
      // Managed services often refuse CONFIG GET: then nothing is known, and nothing said.
      const asked = infos[0]?.primary
      const coverage = asked === undefined ? null : await this.#coverage.read(nodeId(asked), async () => await asked.config('GET', 'cluster-require-full-coverage'))
      if (coverage?.ok === true && Array.isArray(coverage.value) && coverage.value[1] === 'yes') {
        warnings.push('the Redis Cluster has cluster-require-full-coverage yes: while one primary is down, every primary refuses commands and every tenant answers 503; set it to no')
      }
    }
    return { misnamed: null, warnings, replicas }
  }

  /**
   * A client that never got ready: ask the listed Sentinels or Cluster nodes what they are, one
   * short connection each, so that "not a Cluster node" is told apart from "does not answer".
   */
  async #probeListedNodes (): Promise<ServerVerdict> {
    const topology = this.#topology
    if (topology === null || topology.kind === 'single') return NOTHING_KNOWN
    const nodes = topology.kind === 'sentinel' ? topology.sentinels : topology.nodes
    // Side by side: a listed node that accepts connections and never answers costs one probe's
    // timeout, not one per node listed after it.
    const infos = await Promise.all(nodes.map(async (node) => await this.#askNode(node, topology.kind === 'cluster' ? topology : null)))
    for (const [index, node] of nodes.entries()) {
      const info = infos[index]
      if (info === null || info === undefined) continue
      const misnamed = misnamedListedNode(topology.kind, node, info)
      if (misnamed !== null) return { misnamed, warnings: [], replicas: null }
    }
    return NOTHING_KNOWN
  }

  async #askNode (node: RedisNode, access: { username: string | null, password: string | null } | null): Promise<string | null> {
    const topology = this.#topology
    const tls = topology !== null && topology.kind !== 'single' && topology.tls ? {} : undefined
    const probe = new Redis({
      host: node.host,
      port: node.port,
      username: access?.username ?? undefined,
      password: access?.password ?? undefined,
      tls,
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: this.#connectTimeoutMs,
      commandTimeout: this.#connectTimeoutMs
    })
    probe.on('error', () => {})
    try {
      await probe.connect()
      return await probe.info('server')
    } catch {
      return null
    } finally {
      probe.disconnect()
    }
  }
}
