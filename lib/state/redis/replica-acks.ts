import type { RedisClient } from './client.js'
import { storeCall } from '../../store-errors.js'

/**
 * Waits until replicas hold what this connection wrote (Redis WAIT), so that a write a
 * request's answer depends on survives a failover to a replica. WAIT covers every write made
 * on the connection before it, so the requests whose writes returned in the same turn of the
 * event loop share one: a WAIT is sent once per turn, not once per request. WAIT blocks the
 * connection until acknowledged or timed out, so the timeout stays short.
 */
export class ReplicaAcks {
  readonly #client: RedisClient
  readonly #count: number
  readonly #timeoutMs: number
  #next: Promise<boolean> | null = null

  constructor (client: RedisClient, count: number, timeoutMs: number) {
    this.#client = client
    this.#count = count
    this.#timeoutMs = timeoutMs
  }

  /** Whether the writes that already returned on this connection reached enough replicas; true when none are asked for. */
  async acknowledged (): Promise<boolean> {
    if (this.#count === 0) return true
    this.#next ??= new Promise<boolean>((resolve) => {
      setImmediate(() => {
        this.#next = null
        storeCall('replica acknowledgement', async () => await this.#client.wait(this.#count, this.#timeoutMs))
          .then((acks) => { resolve(acks >= this.#count) }, () => { resolve(false) })
      })
    })
    return await this.#next
  }
}
