import type { RedisClient } from './client.js'
import { sandboxEntriesKey, sandboxEntriesKeyPrefix, sandboxKey, sandboxShareKeys } from './keys.js'
import { redisClock, type RedisClock } from './fence.js'
import { storeCall } from '../../store-errors.js'
import { isFresh, SANDBOX_ADDRESSES_PER_TENANT, SANDBOX_MESSAGES_PER_ADDRESS, SANDBOX_RETENTION_MS, SANDBOX_SIZE_PER_TENANT, type SandboxInbox, type SandboxMessage } from '../sandbox-inbox.js'
import { SANDBOX_ADD_LUA } from './scripts.js'
import { decodeJsonSandboxEntry, decodeSandboxEntry, encodeSandboxEntry } from './sandbox-entry.js'

const ADD_COMMAND = 'emailOtpSandboxAdd'

type AddCommand = Record<typeof ADD_COMMAND, (...keysAndArgs: string[]) => Promise<unknown>>

const newestFirst = (a: SandboxMessage, b: SandboxMessage): number => Date.parse(b.createdAt) - Date.parse(a.createdAt)

export interface RedisSandboxShare {
  addressesPerTenant?: number
  /** Bytes of the stored entries. */
  bytesPerTenant?: number
  /** How long a box lasts after its last write. */
  retentionMs?: number
}

/**
 * One capped, expiring list per tenant and address, shared by every instance, and each
 * tenant's share of them bounded as in process (SANDBOX_ADDRESSES_PER_TENANT,
 * SANDBOX_SIZE_PER_TENANT in bytes).
 */
export class RedisSandboxInbox implements SandboxInbox {
  readonly #client: RedisClient
  readonly #clock: RedisClock
  readonly #bounds: string[]

  constructor (client: RedisClient, { addressesPerTenant = SANDBOX_ADDRESSES_PER_TENANT, bytesPerTenant = SANDBOX_SIZE_PER_TENANT, retentionMs = SANDBOX_RETENTION_MS }: RedisSandboxShare = {}) {
    client.defineCommand(ADD_COMMAND, { lua: SANDBOX_ADD_LUA, numberOfKeys: 4 })
    this.#client = client
    this.#clock = redisClock(client)
    this.#bounds = [String(SANDBOX_MESSAGES_PER_ADDRESS), String(retentionMs), String(addressesPerTenant), String(bytesPerTenant)]
  }

  async add (tenantId: string, message: SandboxMessage): Promise<void> {
    const address = message.to.toLowerCase()
    const { boxes, bytes, total } = sandboxShareKeys(tenantId)
    const add = (this.#client as unknown as AddCommand)[ADD_COMMAND]
    await storeCall('sandbox inbox write', async () => await add.call(this.#client,
      sandboxEntriesKey(tenantId, address), boxes, bytes, total,
      encodeSandboxEntry(message), address, sandboxEntriesKeyPrefix(tenantId), ...this.#bounds, await this.#clock.deadline()))
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const [entries, earlier] = await storeCall('sandbox inbox read', async () => await Promise.all([
      this.#client.lrange(sandboxEntriesKey(tenantId, address), 0, SANDBOX_MESSAGES_PER_ADDRESS - 1),
      this.#client.lrange(sandboxKey(tenantId, address), 0, SANDBOX_MESSAGES_PER_ADDRESS - 1)
    ]))
    const now = Date.now()
    const messages = entries.flatMap((entry) => decodeSandboxEntry(entry) ?? [])
    if (earlier.length > 0) messages.push(...earlier.flatMap((entry) => decodeJsonSandboxEntry(entry) ?? []))
    return messages.filter((message) => isFresh(message, now)).sort(newestFirst).slice(0, SANDBOX_MESSAGES_PER_ADDRESS)
  }
}
