import { setTimeout as sleep } from 'node:timers/promises'
import { Cluster, type Redis } from 'ioredis'
import { commandTimeoutOf, fenceMarginMs, type RedisClient } from './client.js'

/*
 * A command the client gave up on (its timeout passed while Redis was frozen, say) stays
 * written on the socket, and Redis runs it when it resumes: the caller answered 503 while the
 * effect (a charge, a token, a consumed code) happened anyway. So every script that changes
 * state starts with a fence: the caller passes the latest moment, on Redis's own clock, at
 * which the script may still start; a script that starts later does nothing and replies with
 * an error. The moment is earlier than the client's timeout by a margin, so that a script
 * that did start has time to reply before the client gives up: "the client gave up" and "the
 * script ran" do not both happen.
 */

/**
 * The fence: a Lua prelude for every state-changing script, placed after its shebang line. The
 * deadline is the script's last argument (epoch ms on Redis's clock), so a script's own
 * arguments keep their positions.
 */
export const FENCE_LUA = `
local fenceTime = redis.call('TIME')
if tonumber(fenceTime[1]) * 1000 + tonumber(fenceTime[2]) / 1000 >= tonumber(ARGV[#ARGV]) then
  return redis.error_reply('FENCED the caller gave up on this command before it started')
end
`

/**
 * The first line of a script that writes: with a shebang, Redis refuses the whole script up
 * front when it is out of memory (rather than at its first write, half-way), and runs it on a
 * replica never.
 */
export const WRITES_SHEBANG = '#!lua\n'

/**
 * The first line of a script that only gives back (a refund, an undo): it frees memory, so
 * Redis must run it at its memory limit too.
 */
export const UNDO_SHEBANG = '#!lua flags=allow-oom\n'

/** How long a tight measurement of the clock offset stands before it is taken again. */
const REFRESH_MS = 30_000
/** A round trip longer than this (a busy process, a frozen Redis) gives a loose bound: taken again soon. */
const LOOSE_MS = 10
const LOOSE_REFRESH_MS = 1000
/** Readings taken in a row at most, until one is tight. */
const SAMPLES = 3

/**
 * Keeps the offset of Redis's clock from this process's clock and gives each fenced command
 * its deadline on Redis's clock. The offset is measured with TIME: sent at local t0, answered
 * T, received at local t1; so Redis's clock is between T - t1 and T - t0 ahead; the lower bound
 * is kept (on the safe side: a deadline never later than meant). A slow round trip gives a
 * loose bound, which would make deadlines needlessly early: such a reading does not replace a
 * tighter one, and is taken again a second later. On a Cluster the lowest of every primary's is
 * kept (a primary that does not answer is read again a second later). It is measured again
 * in the background, and from scratch after every reconnection (a failover can bring another
 * server and its clock).
 */
export class RedisClock {
  readonly #client: RedisClient
  readonly #windowMs: number
  #offsetMs: number | null = null
  #measuredAtMs = 0
  #refreshMs = REFRESH_MS
  #pending: Promise<number> | null = null

  /** `commandTimeoutMs`: how long a caller waits for a command, which the deadlines fall short of by the margin. */
  constructor (client: RedisClient, commandTimeoutMs: number) {
    this.#client = client
    this.#windowMs = commandTimeoutMs - fenceMarginMs(commandTimeoutMs)
    client.on('ready', () => { this.#offsetMs = null })
  }

  /** The deadline, on Redis's clock, for a command sent now: as a script argument. */
  async deadline (): Promise<string> {
    const now = Date.now()
    const offset = this.#offsetMs ?? await this.#measureOnce()
    if (now - this.#measuredAtMs >= this.#refreshMs) this.#measureOnce().catch(() => {})
    return String(Math.floor(now + this.#windowMs + offset))
  }

  /** Commands that arrive together share one measurement. */
  async #measureOnce (): Promise<number> {
    this.#pending ??= this.#measure().finally(() => { this.#pending = null })
    return await this.#pending
  }

  async #measure (): Promise<number> {
    const servers: Redis[] = this.#client instanceof Cluster ? this.#client.nodes('master') : [this.#client]
    if (servers.length === 0) throw new Error('no Redis primary to read the time from')
    const readings: Array<{ lower: number, roundTripMs: number }> = []
    const each = servers.map(async (server) => {
      // A busy moment makes one round trip slow and its bound loose: a few tries, the tightest kept.
      let best = { lower: -Infinity, roundTripMs: Infinity }
      for (let attempt = 0; attempt < SAMPLES && best.roundTripMs > LOOSE_MS; attempt++) {
        const sentMs = Date.now()
        const [seconds, micros] = await server.time()
        const receivedMs = Date.now()
        // The lower bound T - t1; Date.now() is whole milliseconds: one more on the safe side.
        const lower = Number(seconds) * 1000 + Number(micros) / 1000 - receivedMs - 1
        if (lower > best.lower) best = { lower, roundTripMs: receivedMs - sentMs }
      }
      readings.push(best)
    })
    const settled = Promise.allSettled(each)
    // A Cluster primary that does not answer (frozen, cut off) must not hold every other
    // primary's commands: once one has answered, the others have a moment more.
    await Promise.race([settled, Promise.any(each).then(async () => { await sleep(LOOSE_MS) })])
    if (readings.length === 0) {
      const [failure] = (await settled).flatMap((result) => result.status === 'rejected' ? [result.reason] : [])
      throw failure instanceof Error ? failure : new Error('no Redis primary answered TIME')
    }
    const complete = readings.length === servers.length
    const lower = Math.min(...readings.map((reading) => reading.lower))
    const loose = !complete || readings.some((reading) => reading.roundTripMs > LOOSE_MS)
    // A tight reading of every primary replaces the bound (the clocks may have been stepped); a
    // loose one keeps the tighter bound read before; one that missed a primary keeps the bound
    // read before, which counted it.
    const previous = this.#offsetMs
    const offset = previous === null || (complete && !loose) ? lower : complete ? Math.max(previous, lower) : previous
    this.#offsetMs = offset
    this.#measuredAtMs = Date.now()
    this.#refreshMs = loose ? LOOSE_REFRESH_MS : REFRESH_MS
    return offset
  }
}

const clocks = new WeakMap<RedisClient, RedisClock>()

/** The clock of a client made by createRedisClient (or, for a client made elsewhere, one with the timeout it was given). */
export function redisClock (client: RedisClient): RedisClock {
  let clock = clocks.get(client)
  if (clock === undefined) {
    const options = client instanceof Cluster ? client.options.redisOptions : client.options
    clock = new RedisClock(client, commandTimeoutOf(client) ?? options?.commandTimeout ?? 1000)
    clocks.set(client, clock)
  }
  return clock
}
