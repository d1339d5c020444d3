import { Cluster, Command, type Redis } from 'ioredis'
import type { RedisClient } from './client.js'
import { storeCall } from '../../store-errors.js'

/*
 * Redis WAIT counts the replicas holding every write made on the connection it is sent on, and
 * nothing else. So it must follow a write to the very connection that carried it: on one
 * server (plain or found through Sentinel) the client's own; on a Cluster the connection to the
 * primary serving the written key's slot. Sent anywhere else it answers for other writes: on
 * another primary, or on a connection opened since (to a promoted replica, say), it finds none
 * of ours to wait for and counts every replica, and a write the failover lost would pass for
 * acknowledged. A write whose server is in doubt (its slot changed hands while it was out)
 * therefore counts as not acknowledged.
 */

/** A server connection, and its socket when a write's reply came back on it. */
interface Landing {
  connection: Redis
  socket: Redis['stream']
}

/** One write whose acknowledgement may be asked for: where it was sent, where its reply came from. */
export class TrackedWrite {
  readonly #route: () => Redis | null
  readonly #sentTo: Redis | null
  #landing: Landing | null = null

  constructor (route: () => Redis | null) {
    this.#route = route
    this.#sentTo = route()
  }

  /**
   * Notes where the reply came from, and passes it on: `.then(write.landed)` on the command, so
   * that it runs as the reply is read, before any other reply or a reconnection can come in.
   */
  readonly landed = <T>(reply: T): T => {
    const connection = this.#route()
    this.#landing = connection !== null && connection === this.#sentTo ? { connection, socket: connection.stream } : null
    return reply
  }

  get landing (): Landing | null {
    return this.#landing
  }
}

/** The write of a service that asks for no acknowledgement: nothing to track. */
const UNTRACKED = new TrackedWrite(() => null)

/** The connection to the primary that serves `key`'s slot now, as the Cluster client routes a command on it. */
function primaryFor (cluster: Cluster, key: string): Redis | null {
  const node = cluster.slots[new Command('exists', [key]).getSlot()]?.[0]
  if (node === undefined) return null
  return cluster.nodes('all').find((connection) => `${connection.options.host ?? ''}:${connection.options.port ?? ''}` === node) ?? null
}

/**
 * Waits until replicas hold what a request wrote (Redis WAIT), so that a write a request's
 * answer depends on survives a failover to a replica. WAIT covers every write made on its
 * connection before it, so the requests whose writes returned on one connection in the same turn
 * of the event loop share one: a WAIT is sent once per turn and per connection (per primary on
 * a Cluster), not once per request. WAIT blocks its connection until acknowledged or timed out,
 * so the timeout stays short.
 */
export class ReplicaAcks {
  readonly #client: RedisClient
  readonly #count: number
  readonly #timeoutMs: number
  /** Per connection, the WAIT this turn's writes share: the socket it went out on when enough replicas answered, else null. */
  readonly #next = new Map<Redis, Promise<Landing['socket'] | null>>()
  #shortfalls = 0

  /** `count` replicas within `timeoutMs`; a count of 0 asks for none. */
  constructor (client: RedisClient, { count, timeoutMs }: { count: number, timeoutMs: number }) {
    this.#client = client
    this.#count = count
    this.#timeoutMs = timeoutMs
  }

  /** A write on `key` about to be sent: call its `landed` with the reply, then ask `acknowledged`. */
  write (key: string): TrackedWrite {
    if (this.#count === 0) return UNTRACKED
    const client = this.#client
    return new TrackedWrite(client instanceof Cluster ? () => primaryFor(client, key) : () => client)
  }

  /** Whether enough replicas hold every one of `writes` (each landed); true when none are asked for. */
  async acknowledged (writes: readonly TrackedWrite[]): Promise<boolean> {
    if (this.#count === 0) return true
    const enough = await this.#allAcknowledged(writes)
    if (!enough) this.#shortfalls++
    return enough
  }

  /** Calls of `acknowledged` that answered false: each a write answered 503, undone where it could be. */
  get shortfalls (): number {
    return this.#shortfalls
  }

  async #allAcknowledged (writes: readonly TrackedWrite[]): Promise<boolean> {
    const landings: Landing[] = []
    for (const write of writes) {
      const { landing } = write
      if (landing === null) return false
      landings.push(landing)
    }
    const connections = [...new Set(landings.map((landing) => landing.connection))]
    const sockets = new Map(await Promise.all(connections.map(async (connection) => [connection, await this.#wait(connection)] as const)))
    // A reply read on an earlier socket of the connection is a write this WAIT does not cover.
    return landings.every((landing) => sockets.get(landing.connection) === landing.socket)
  }

  async #wait (connection: Redis): Promise<Landing['socket'] | null> {
    let next = this.#next.get(connection)
    if (next === undefined) {
      next = new Promise((resolve) => {
        setImmediate(() => {
          this.#next.delete(connection)
          // A Cluster's node connections queue commands while they connect: a WAIT queued
          // there would go out on the next socket, where it counts nothing of ours.
          if (connection.status !== 'ready') {
            resolve(null)
            return
          }
          const socket = connection.stream
          storeCall('replica acknowledgement', async () => await connection.wait(this.#count, this.#timeoutMs))
            .then((acks) => { resolve(acks >= this.#count ? socket : null) }, () => { resolve(null) })
        })
      })
      this.#next.set(connection, next)
    }
    return await next
  }
}
