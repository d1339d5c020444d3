import { Cluster } from 'ioredis'
import type { RedisClient } from './client.js'

/** Runs the script with these keys, then these arguments. */
export type KeyedScript = (keys: readonly string[], args: readonly string[]) => Promise<unknown>

type ScriptCommand = (...keysAndArgs: string[]) => Promise<unknown>

/**
 * A script whose number of keys varies from call to call, run through ioredis's auto-pipelining.
 *
 * On a single server (or one found through Sentinel) it is defined once, its key count as its
 * first argument: auto-pipelining there batches every command together, whatever its keys.
 *
 * On a Cluster it is defined once per number of keys (1 to `maxKeys`) with that number fixed,
 * so that ioredis takes the first argument for the first key. Defined without it, the count goes
 * first, and auto-pipelining groups the command by the slot of that count rather than of its
 * keys: a pipeline then holds keys of several nodes' slots and fails whole, with every other
 * command batched into it in the same turn (an idempotency claim, a dispatch's admission)
 * answered 503. All are defined up front, as ioredis's pipelines only reload (after a restart or
 * failover) the scripts defined when they were created; they share one SHA, so Redis holds the
 * script once.
 *
 * Every definition costs every pipeline ioredis makes (it copies each script onto it, one
 * auto-pipelined batch at a time): keep `maxKeys` to what the hot path needs, and take
 * `defineWideKeyedScript` for a script off it with many keys.
 */
export function defineKeyedScript (client: RedisClient, name: string, lua: string, maxKeys: number): KeyedScript {
  if (!(client instanceof Cluster)) return defineWithCount(client, name, lua, maxKeys)
  // Indexed by number of keys (0 unused), so that a call looks up no name.
  const runs = Array.from({ length: maxKeys + 1 }, (_, keys) => keys === 0 ? undefined : defined(client, `${name}${keys}`, { lua, numberOfKeys: keys }))
  return async (keys, args) => {
    const run = runs[keys.length]
    if (run === undefined) throw new RangeError(`${name} has ${keys.length} keys; 1 to ${maxKeys} are defined`)
    return await run.call(client, ...keys, ...args)
  }
}

/**
 * A script whose number of keys varies, for writes off the request path that gather many keys
 * in one call (a verification log's batch), where a definition per key count would cost every
 * auto-pipelined batch of the hot path (see defineKeyedScript). It is defined once, and on a
 * Cluster never auto-pipelined: each call is sent on its own, routed by its keys.
 */
export function defineWideKeyedScript (client: RedisClient, name: string, lua: string, maxKeys: number): KeyedScript {
  if (client instanceof Cluster) {
    // A new array: ioredis's default one is shared by every client of the process.
    client.options.autoPipeliningIgnoredCommands = [...(client.options.autoPipeliningIgnoredCommands ?? []), name]
  }
  return defineWithCount(client, name, lua, maxKeys)
}

/** Defines the command and returns the method ioredis added for it. */
function defined (client: RedisClient, name: string, definition: { lua: string, numberOfKeys?: number }): ScriptCommand {
  client.defineCommand(name, definition)
  const run = (client as unknown as Record<string, ScriptCommand | undefined>)[name]
  if (run === undefined) throw new Error(`defineCommand did not add ${name}`)
  return run
}

function defineWithCount (client: RedisClient, name: string, lua: string, maxKeys: number): KeyedScript {
  const run = defined(client, name, { lua })
  return async (keys, args) => {
    if (keys.length < 1 || keys.length > maxKeys) throw new RangeError(`${name} has ${keys.length} keys; 1 to ${maxKeys} are allowed`)
    // A string: ioredis encodes a number argument slower.
    return await run.call(client, String(keys.length), ...keys, ...args)
  }
}
