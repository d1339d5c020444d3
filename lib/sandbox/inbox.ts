import type { RedisClient } from '../redis/client.js'
import { FENCE_LUA, redisClock, WRITES_SHEBANG, type RedisClock } from '../redis/fence.js'
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
 * Addresses whose messages one tenant keeps in process: past it (or past
 * MEMORY_CHARACTERS_PER_TENANT), that tenant's least recently written box goes, never another
 * tenant's (sandbox keys can be public, the demo key is).
 */
export const MEMORY_ADDRESSES_PER_TENANT = 1000
/**
 * Characters of messages one tenant keeps in process. A tenant's own templates can make a
 * message about 330,000 characters (a 64 KiB text part and a 256 KiB HTML part), so the count
 * of addresses alone would let one tenant hold several GB; 32 Mi characters keep at least a
 * hundred of the largest messages and thousands of ordinary ones.
 */
export const MEMORY_CHARACTERS_PER_TENANT = 32 * 1024 * 1024

function fresh (message: SandboxMessage, now: number): boolean {
  return Date.parse(message.createdAt) > now - SANDBOX_RETENTION_MS
}

function characters (message: SandboxMessage): number {
  return message.requestId.length + message.to.length + message.from.length + message.subject.length + message.text.length + message.html.length + message.code.length + message.createdAt.length
}

interface Box {
  messages: SandboxMessage[]
  characters: number
}

interface Share {
  /** In order of the last write: the first box is the one to forget first. */
  boxes: Map<string, Box>
  characters: number
}

export class MemorySandboxInbox implements SandboxInbox {
  readonly #shares = new Map<string, Share>()
  readonly #addressesPerTenant: number
  readonly #charactersPerTenant: number

  constructor (addressesPerTenant = MEMORY_ADDRESSES_PER_TENANT, charactersPerTenant = MEMORY_CHARACTERS_PER_TENANT) {
    this.#addressesPerTenant = addressesPerTenant
    this.#charactersPerTenant = charactersPerTenant
  }

  async add (tenantId: string, message: SandboxMessage): Promise<void> {
    let share = this.#shares.get(tenantId)
    if (share === undefined) {
      share = { boxes: new Map(), characters: 0 }
      this.#shares.set(tenantId, share)
    }
    const address = message.to.toLowerCase()
    const previous = share.boxes.get(address)
    const messages = [message, ...(previous?.messages ?? [])].slice(0, SANDBOX_MESSAGES_PER_ADDRESS)
    const box = { messages, characters: messages.reduce((sum, kept) => sum + characters(kept), 0) }
    if (previous !== undefined) {
      share.boxes.delete(address)
      share.characters -= previous.characters
    }
    share.boxes.set(address, box)
    share.characters += box.characters
    // The tenant's least recently written boxes go first, never another tenant's; the box just
    // written always stays.
    for (const [oldest, forgotten] of share.boxes) {
      if (share.boxes.size <= this.#addressesPerTenant && share.characters <= this.#charactersPerTenant) break
      if (oldest === address) break
      share.boxes.delete(oldest)
      share.characters -= forgotten.characters
    }
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const now = Date.now()
    return (this.#shares.get(tenantId)?.boxes.get(address.toLowerCase())?.messages ?? []).filter((message) => fresh(message, now))
  }
}

/**
 * KEYS the address's list; ARGV the message, its cap, the retention ms, the fence's deadline
 * (lib/redis/fence.ts). A script rather than MULTI: fenced, a message the caller gave up on
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
    return raw.map((entry) => JSON.parse(entry) as SandboxMessage).filter((message) => fresh(message, now))
  }
}
