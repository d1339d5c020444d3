import type { RedisClient } from '../redis/client.js'
import { storeCall } from '../store-errors.js'

/** A message a sandbox key "sent": kept for the tenant's own tests, never delivered. */
export interface SandboxMessage {
  requestId: string
  to: string
  from: string
  subject: string
  text: string
  html: string
  /** The plaintext code, so partners' tests can complete the flow. Sandbox only. */
  code: string
  createdAt: string
}

export interface SandboxInbox {
  add (tenantId: string, message: SandboxMessage): Promise<void>
  /** Newest first, messages younger than the retention only. */
  list (tenantId: string, address: string): Promise<SandboxMessage[]>
}

export const SANDBOX_RETENTION_MS = 60 * 60 * 1000
/** Per address: enough for any test flow, small enough to bound memory. */
export const SANDBOX_MESSAGES_PER_ADDRESS = 20
const MEMORY_MAX_ADDRESSES = 10_000

function boxKey (tenantId: string, address: string): string {
  return `${tenantId}\0${address.toLowerCase()}`
}

function fresh (message: SandboxMessage, now: number): boolean {
  return Date.parse(message.createdAt) > now - SANDBOX_RETENTION_MS
}

export class MemorySandboxInbox implements SandboxInbox {
  readonly #boxes = new Map<string, SandboxMessage[]>()

  async add (tenantId: string, message: SandboxMessage): Promise<void> {
    const key = boxKey(tenantId, message.to)
    const box = [message, ...(this.#boxes.get(key) ?? [])].slice(0, SANDBOX_MESSAGES_PER_ADDRESS)
    // Re-inserting keeps the map ordered by last use; the oldest box goes first when full.
    this.#boxes.delete(key)
    this.#boxes.set(key, box)
    if (this.#boxes.size > MEMORY_MAX_ADDRESSES) {
      const oldest = this.#boxes.keys().next().value
      if (oldest !== undefined) this.#boxes.delete(oldest)
    }
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const now = Date.now()
    return (this.#boxes.get(boxKey(tenantId, address)) ?? []).filter((message) => fresh(message, now))
  }
}

/** One capped, expiring list per tenant and address, shared by every instance. */
export class RedisSandboxInbox implements SandboxInbox {
  readonly #client: RedisClient

  constructor (client: RedisClient) {
    this.#client = client
  }

  #key (tenantId: string, address: string): string {
    return `sandbox:{${tenantId}}:${address.toLowerCase()}`
  }

  async add (tenantId: string, message: SandboxMessage): Promise<void> {
    const key = this.#key(tenantId, message.to)
    await storeCall('sandbox inbox write', async () => await this.#client.multi()
      .lpush(key, JSON.stringify(message))
      .ltrim(key, 0, SANDBOX_MESSAGES_PER_ADDRESS - 1)
      .pexpire(key, SANDBOX_RETENTION_MS)
      .exec())
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const raw = await storeCall('sandbox inbox read', async () => await this.#client.lrange(this.#key(tenantId, address), 0, SANDBOX_MESSAGES_PER_ADDRESS - 1))
    const now = Date.now()
    return raw.map((entry) => JSON.parse(entry) as SandboxMessage).filter((message) => fresh(message, now))
  }
}
