import type { RedisClient } from './client.js'
import { sandboxEntriesKey, sandboxKey } from './keys.js'
import { redisClock, type RedisClock } from './fence.js'
import { storeCall } from '../../store-errors.js'
import { isFresh, SANDBOX_MESSAGES_PER_ADDRESS, SANDBOX_RETENTION_MS, type SandboxInbox, type SandboxMessage } from '../sandbox-inbox.js'
import { SANDBOX_ADD_LUA } from './scripts.js'
import { decodeJsonSandboxEntry, decodeSandboxEntry, encodeSandboxEntry } from './sandbox-entry.js'

const ADD_COMMAND = 'emailOtpSandboxAdd'

type AddCommand = Record<typeof ADD_COMMAND, (key: string, message: string, cap: string, retentionMs: string, deadline: string) => Promise<unknown>>

const newestFirst = (a: SandboxMessage, b: SandboxMessage): number => Date.parse(b.createdAt) - Date.parse(a.createdAt)

/** One capped, expiring list per tenant and address, shared by every instance. */
export class RedisSandboxInbox implements SandboxInbox {
  readonly #client: RedisClient
  readonly #clock: RedisClock

  constructor (client: RedisClient) {
    client.defineCommand(ADD_COMMAND, { lua: SANDBOX_ADD_LUA, numberOfKeys: 1 })
    this.#client = client
    this.#clock = redisClock(client)
  }

  async add (tenantId: string, message: SandboxMessage): Promise<void> {
    const key = sandboxEntriesKey(tenantId, message.to)
    const add = (this.#client as unknown as AddCommand)[ADD_COMMAND]
    await storeCall('sandbox inbox write', async () => await add.call(this.#client, key, encodeSandboxEntry(message), String(SANDBOX_MESSAGES_PER_ADDRESS), String(SANDBOX_RETENTION_MS), await this.#clock.deadline()))
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
