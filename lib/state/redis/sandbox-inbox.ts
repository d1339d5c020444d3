import type { RedisClient } from './client.js'
import { sandboxKey } from './keys.js'
import { redisClock, type RedisClock } from './fence.js'
import { storeCall } from '../../store-errors.js'
import { isFresh, SANDBOX_MESSAGES_PER_ADDRESS, SANDBOX_RETENTION_MS, type SandboxInbox, type SandboxMessage } from '../sandbox-inbox.js'
import { SANDBOX_ADD_LUA } from './scripts.js'

const ADD_COMMAND = 'emailOtpSandboxAdd'

type AddCommand = Record<typeof ADD_COMMAND, (key: string, message: string, cap: string, retentionMs: string, deadline: string) => Promise<unknown>>

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
    const key = sandboxKey(tenantId, message.to)
    const add = (this.#client as unknown as AddCommand)[ADD_COMMAND]
    await storeCall('sandbox inbox write', async () => await add.call(this.#client, key, JSON.stringify(message), String(SANDBOX_MESSAGES_PER_ADDRESS), String(SANDBOX_RETENTION_MS), await this.#clock.deadline()))
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const raw = await storeCall('sandbox inbox read', async () => await this.#client.lrange(sandboxKey(tenantId, address), 0, SANDBOX_MESSAGES_PER_ADDRESS - 1))
    const now = Date.now()
    return raw.map((entry) => JSON.parse(entry) as SandboxMessage).filter((message) => isFresh(message, now))
  }
}
