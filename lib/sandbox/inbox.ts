import { ShareLru } from '../memory/share-lru.js'
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
/**
 * Addresses whose messages one tenant keeps in process: past it, that tenant's least recently
 * written box goes, never another tenant's (sandbox keys can be public, the demo key is).
 */
export const MEMORY_ADDRESSES_PER_TENANT = 1000

function fresh (message: SandboxMessage, now: number): boolean {
  return Date.parse(message.createdAt) > now - SANDBOX_RETENTION_MS
}

export class MemorySandboxInbox implements SandboxInbox {
  readonly #boxes: ShareLru<SandboxMessage[]>

  constructor (addressesPerTenant = MEMORY_ADDRESSES_PER_TENANT) {
    this.#boxes = new ShareLru(addressesPerTenant)
  }

  async add (tenantId: string, message: SandboxMessage): Promise<void> {
    const address = message.to.toLowerCase()
    const box = [message, ...(this.#boxes.get(tenantId, address) ?? [])].slice(0, SANDBOX_MESSAGES_PER_ADDRESS)
    this.#boxes.set(tenantId, address, box)
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const now = Date.now()
    return (this.#boxes.get(tenantId, address.toLowerCase()) ?? []).filter((message) => fresh(message, now))
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
