import type { RedisClient } from './client.js'
import { storeCall } from '../../store-errors.js'

type Callback = (error: Error | null, result: unknown) => void

/**
 * The connection as @fastify/rate-limit's Redis store sees it: the commands it defines run as
 * the service's own store calls, within the request's one budget (lib/store-errors.ts), so that
 * a stalled Redis costs an account route one timeout in all (the plugin's count then lets it
 * through, and the route's own call fails at once), not one for the count and one more for
 * the route.
 */
export function withinRequestBudget (redis: RedisClient): object {
  const commands = redis as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>
  const budgeted: Record<string, unknown> = {
    defineCommand (name: string, definition: { numberOfKeys: number, lua: string }): void {
      redis.defineCommand(name, definition)
      const command = (commands[name] as (...args: unknown[]) => Promise<unknown>).bind(redis)
      budgeted[name] = (...args: unknown[]): void => {
        const callback = args.pop() as Callback
        storeCall(`rate limit ${name}`, async () => await command(...args)).then((result) => { callback(null, result) }, (error: Error) => { callback(error, null) })
      }
    }
  }
  return budgeted
}
