/**
 * Where @fastify/rate-limit keeps the counters of the routes outside admission (account and
 * public routes) when they are in Redis: its own namespace beside the admission's velocity
 * counters (`rl:<limit>:`), named by the plugin rather than the Redis adapter since the plugin
 * builds the keys under it. Deployed instances count under it too
 * (test/lib/state/redis/key-names.test.ts).
 */
export const ROUTE_LIMIT_NAMESPACE = 'rl:route:'

/** What @fastify/rate-limit counts in, as the state factory chose it. */
export interface RouteLimitStore {
  readonly nameSpace: string
  /** What the plugin's `redis` option takes (its Redis store over the service's connection); null: its own in-memory store. */
  readonly redis: object | null
}
