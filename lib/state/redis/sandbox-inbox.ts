import type { RedisClient } from './client.js'
import { FENCE_LUA, redisClock, WRITES_SHEBANG, type RedisClock } from './fence.js'
import { storeCall } from '../../store-errors.js'
import { isFresh, SANDBOX_MESSAGES_PER_ADDRESS, SANDBOX_RETENTION_MS, type SandboxInbox, type SandboxMessage } from '../sandbox-inbox.js'

/**
 * KEYS the address's list; ARGV the message, its cap, the retention ms, the fence's deadline
 * (lib/state/redis/fence.ts). A script rather than MULTI: fenced, a message the caller gave up on
 * (its dispatch answered 503 and refunded) never appears later, and with its shebang Redis
 * refuses it whole at its memory limit.
 */
const ADD_LUA = `${WRITES_SHEBANG}${FENCE_LUA}
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`

const ADD_COMMAND = 'emailOtpSandboxAdd'

type AddCommand = Record<typeof ADD_COMMAND, (key: string, message: string, cap: string, retentionMs: string, deadline: string) => Promise<unknown>>

/** One capped, expiring list per tenant and address, shared by every instance. */
export class RedisSandboxInbox implements SandboxInbox {
  readonly #client: RedisClient
  readonly #clock: RedisClock

  constructor (client: RedisClient) {
    client.defineCommand(ADD_COMMAND, { lua: ADD_LUA, numberOfKeys: 1 })
    this.#client = client
    this.#clock = redisClock(client)
  }

  #key (tenantId: string, address: string): string {
    return `sandbox:{${tenantId}}:${address.toLowerCase()}`
  }

  async add (tenantId: string, message: SandboxMessage): Promise<void> {
    const key = this.#key(tenantId, message.to)
    const add = (this.#client as unknown as AddCommand)[ADD_COMMAND]
    await storeCall('sandbox inbox write', async () => await add.call(this.#client, key, JSON.stringify(message), String(SANDBOX_MESSAGES_PER_ADDRESS), String(SANDBOX_RETENTION_MS), await this.#clock.deadline()))
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const raw = await storeCall('sandbox inbox read', async () => await this.#client.lrange(this.#key(tenantId, address), 0, SANDBOX_MESSAGES_PER_ADDRESS - 1))
    const now = Date.now()
    return raw.map((entry) => JSON.parse(entry) as SandboxMessage).filter((message) => isFresh(message, now))
  }
}
