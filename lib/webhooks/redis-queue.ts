import type { RedisClient } from '../redis/client.js'
import { DEAD_LETTER_CAP, parseDelivery, revived, type ClaimedDelivery, type DeadLetter, type Delivery, type OnceKey, type WebhookQueue } from './queue.js'

/*
 * Keys, all with the hash tag {webhooks} so that every script runs on one Cluster slot (the
 * queue is one per deployment, not per tenant):
 *   webhooks:{webhooks}:stream       the deliveries to attempt, consumer group `workers`
 *   webhooks:{webhooks}:retry        sorted set: delivery JSON → epoch ms it is due again
 *   webhooks:{webhooks}:dead         stream of the deliveries given up (capped)
 *   webhooks:{webhooks}:once:<key>   exists while an event queued once per key may not be again
 * A consumer reads with XREADGROUP, so each delivery goes to one consumer; it settles it with
 * one script that first checks (XPENDING) that it still holds it: a consumer whose delivery
 * was taken over with XAUTOCLAIM (it looked dead) cannot settle it a second time.
 */
const PREFIX = 'webhooks:{webhooks}:'
const STREAM = `${PREFIX}stream`
const RETRY = `${PREFIX}retry`
const DEAD = `${PREFIX}dead`
const GROUP = 'workers'
const STREAM_ID = /^[0-9]{1,20}-[0-9]{1,20}$/
/** Due retries moved back to the stream per claim. */
const PROMOTE_BATCH = 100

/** KEYS stream, once key. ARGV once ttl ms ('0': none), then the deliveries. Reply 1 queued, 0 seen. */
const ENQUEUE_LUA = `
if ARGV[1] ~= '0' and not redis.call('SET', KEYS[2], '1', 'PX', ARGV[1], 'NX') then return 0 end
for i = 2, #ARGV do redis.call('XADD', KEYS[1], '*', 'd', ARGV[i]) end
return 1
`

/**
 * KEYS stream, retry. ARGV group, consumer, now ms, max, stuck ms, autoclaim cursor.
 * Reply { next cursor, then { id, { 'd', delivery } } per claimed entry }.
 */
const CLAIM_LUA = `
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[3], 'LIMIT', 0, ${PROMOTE_BATCH})
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[2], member)
  redis.call('XADD', KEYS[1], '*', 'd', member)
end
local max = tonumber(ARGV[4])
local taken = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[5], ARGV[6], 'COUNT', max)
local reply = { taken[1] }
for _, entry in ipairs(taken[2]) do
  if entry[2] then reply[#reply + 1] = entry end
end
if #reply - 1 < max then
  local fresh = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', max - #reply + 1, 'STREAMS', KEYS[1], '>')
  if fresh then
    for _, entry in ipairs(fresh[1][2]) do reply[#reply + 1] = entry end
  end
end
return reply
`

/** Settling a delivery the consumer holds: the check every settle script starts with. */
const HELD_LUA = `
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1, ARGV[3])
if #held == 0 then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
`

/** KEYS stream. ARGV group, entry id, consumer. */
const COMPLETE_LUA = `${HELD_LUA}
return 1
`

/** KEYS stream, retry. ARGV group, entry id, consumer, delivery, due ms. */
const RETRY_LUA = `${HELD_LUA}
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])
return 1
`

/** KEYS stream, dead. ARGV group, entry id, consumer, delivery. */
const BURY_LUA = `${HELD_LUA}
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ${DEAD_LETTER_CAP}, '*', 'd', ARGV[4])
return 1
`

/** KEYS dead, stream. ARGV dead letter id, delivery. Moves it once, however many replay it. */
const REPLAY_LUA = `
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', 'd', ARGV[2])
return 1
`

const COMMANDS = {
  enqueue: ['emailOtpWebhookEnqueue', ENQUEUE_LUA, 2],
  claim: ['emailOtpWebhookClaim', CLAIM_LUA, 2],
  complete: ['emailOtpWebhookComplete', COMPLETE_LUA, 1],
  retry: ['emailOtpWebhookRetry', RETRY_LUA, 2],
  bury: ['emailOtpWebhookBury', BURY_LUA, 2],
  replay: ['emailOtpWebhookReplay', REPLAY_LUA, 2]
} as const

type Command = (...keysAndArgs: string[]) => Promise<unknown>

type StreamEntry = [id: string, fields: string[]]

function entries (reply: unknown): StreamEntry[] {
  if (!Array.isArray(reply)) throw new Error(`unexpected stream reply: ${JSON.stringify(reply)}`)
  return reply.filter((entry): entry is StreamEntry => Array.isArray(entry) && typeof entry[0] === 'string' && Array.isArray(entry[1]))
}

/** The delivery in a stream entry's `d` field; null for an entry that holds none. */
function deliveryOf (entry: StreamEntry): Delivery | null {
  const index = entry[1].indexOf('d')
  const text = index === -1 ? undefined : entry[1][index + 1]
  return typeof text === 'string' ? parseDelivery(text) : null
}

/**
 * The webhook queue in Redis: durable across restarts of the service, shared by every
 * instance through one consumer group. Each call is one script (or one read), one round trip.
 */
export class RedisWebhookQueue implements WebhookQueue {
  readonly #client: RedisClient
  readonly #commands: Record<keyof typeof COMMANDS, Command>
  #groupReady = false
  /** Where XAUTOCLAIM goes on: it scans the pending entries a slice per claim. */
  #cursor = '0-0'

  constructor (client: RedisClient) {
    this.#client = client
    const bound = {} as Record<keyof typeof COMMANDS, Command>
    for (const [name, [command, lua, numberOfKeys]] of Object.entries(COMMANDS) as Array<[keyof typeof COMMANDS, typeof COMMANDS[keyof typeof COMMANDS]]>) {
      client.defineCommand(command, { lua, numberOfKeys })
      const method = (client as unknown as Record<string, Command>)[command]
      if (method === undefined) throw new Error(`defineCommand did not add ${command}`)
      bound[name] = method.bind(client)
    }
    this.#commands = bound
  }

  async enqueue (deliveries: readonly Delivery[], once?: OnceKey): Promise<boolean> {
    if (deliveries.length === 0) return false
    const onceKey = once === undefined ? STREAM : `${PREFIX}once:${once.key}`
    const ttl = once === undefined ? '0' : String(Math.max(1, Math.ceil(once.ttlMs)))
    return await this.#commands.enqueue(STREAM, onceKey, ttl, ...deliveries.map((delivery) => JSON.stringify(delivery))) === 1
  }

  async claim (consumer: string, max: number, stuckMs: number): Promise<ClaimedDelivery[]> {
    const reply = await this.#withGroup(async () => await this.#commands.claim(STREAM, RETRY, GROUP, consumer, String(Date.now()), String(max), String(stuckMs), this.#cursor))
    if (!Array.isArray(reply) || typeof reply[0] !== 'string') throw new Error(`unexpected reply from the webhook claim script: ${JSON.stringify(reply)}`)
    this.#cursor = reply[0]
    const claimed: ClaimedDelivery[] = []
    for (const entry of entries(reply.slice(1))) {
      const delivery = deliveryOf(entry)
      // An entry that is not a delivery can never be sent: it is acknowledged and dropped.
      if (delivery === null) await this.#commands.complete(STREAM, GROUP, entry[0], consumer)
      else claimed.push({ entryId: entry[0], delivery })
    }
    return claimed
  }

  async complete (consumer: string, claimed: ClaimedDelivery): Promise<void> {
    await this.#commands.complete(STREAM, GROUP, claimed.entryId, consumer)
  }

  async retry (consumer: string, claimed: ClaimedDelivery, delivery: Delivery, dueMs: number): Promise<void> {
    await this.#commands.retry(STREAM, RETRY, GROUP, claimed.entryId, consumer, JSON.stringify(delivery), String(Math.floor(dueMs)))
  }

  async bury (consumer: string, claimed: ClaimedDelivery, delivery: Delivery): Promise<void> {
    await this.#commands.bury(STREAM, DEAD, GROUP, claimed.entryId, consumer, JSON.stringify(delivery))
  }

  async deadLetters (limit: number): Promise<DeadLetter[]> {
    const letters: DeadLetter[] = []
    for (const entry of entries(await this.#client.xrevrange(DEAD, '+', '-', 'COUNT', limit))) {
      const delivery = deliveryOf(entry)
      if (delivery !== null) letters.push({ id: entry[0], deadAtMs: Number(entry[0].split('-')[0]), delivery })
    }
    return letters
  }

  async replay (ids: readonly string[] | null): Promise<number> {
    let replayed = 0
    if (ids !== null) {
      for (const id of ids) {
        if (!STREAM_ID.test(id)) continue
        const [entry] = entries(await this.#client.xrange(DEAD, id, id))
        if (entry !== undefined) replayed += await this.#move(entry)
      }
      return replayed
    }
    // Everything that is dead now, a page at a time; letters buried meanwhile stay.
    let remaining = await this.#client.xlen(DEAD)
    let from = '-'
    while (remaining > 0) {
      const page = entries(await this.#client.xrange(DEAD, from, '+', 'COUNT', Math.min(100, remaining)))
      if (page.length === 0) break
      for (const entry of page) replayed += await this.#move(entry)
      remaining -= page.length
      from = `(${page[page.length - 1]?.[0] ?? ''}`
    }
    return replayed
  }

  /** The Redis client belongs to whoever opened it. */
  async close (): Promise<void> {}

  async #move (entry: StreamEntry): Promise<number> {
    const delivery = deliveryOf(entry)
    if (delivery === null) return 0
    return await this.#commands.replay(DEAD, STREAM, entry[0], JSON.stringify(revived(delivery, Date.now()))) === 1 ? 1 : 0
  }

  /** Creates the consumer group when missing: on first use, or after Redis lost its data. */
  async #withGroup<T> (operation: () => Promise<T>): Promise<T> {
    if (!this.#groupReady) await this.#createGroup()
    try {
      return await operation()
    } catch (error) {
      if (!String((error as Error).message).includes('NOGROUP')) throw error
      this.#groupReady = false
      this.#cursor = '0-0'
      await this.#createGroup()
      return await operation()
    }
  }

  async #createGroup (): Promise<void> {
    try {
      // From the start of the stream: deliveries queued before any worker existed are read too.
      await this.#client.xgroup('CREATE', STREAM, GROUP, '0', 'MKSTREAM')
    } catch (error) {
      if (!String((error as Error).message).includes('BUSYGROUP')) throw error
    }
    this.#groupReady = true
  }
}
