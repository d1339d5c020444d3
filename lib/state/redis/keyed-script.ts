import type { RedisClient } from './client.js'

/** Runs the script with these keys, then these arguments. */
export type KeyedScript = (keys: readonly string[], args: readonly string[]) => Promise<unknown>

/**
 * A script whose number of keys varies from call to call, defined once per number of keys
 * (1 to `maxKeys`) with that number fixed: ioredis then takes the first argument for the first
 * key. Defined without it, the count goes first, and on a Cluster ioredis's auto-pipelining
 * groups the command by the slot of that count rather than of its keys: a pipeline then holds
 * keys of several nodes' slots and fails whole, with every other command batched into it in the
 * same turn (an idempotency claim, a dispatch's admission) answered 503. All are defined up
 * front, as ioredis's pipelines only reload (after a restart or failover) the scripts defined
 * when they were created; they share one SHA, so Redis holds the script once.
 */
export function defineKeyedScript (client: RedisClient, name: string, lua: string, maxKeys: number): KeyedScript {
  for (let keys = 1; keys <= maxKeys; keys++) client.defineCommand(`${name}${keys}`, { lua, numberOfKeys: keys })
  const commands = client as unknown as Record<string, ((...keysAndArgs: string[]) => Promise<unknown>) | undefined>
  return async (keys, args) => {
    const run = commands[`${name}${keys.length}`]
    if (run === undefined) throw new RangeError(`${name} has ${keys.length} keys; 1 to ${maxKeys} are defined`)
    return await run.call(client, ...keys, ...args)
  }
}
