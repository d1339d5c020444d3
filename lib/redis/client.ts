import type { Cluster, Redis } from 'ioredis'

/**
 * The shared connection the Redis-backed stores take: one server (plain or found through
 * Sentinel) or a Cluster. Both speak the same commands; every script and MULTI the stores run
 * touches keys of a single hash slot, so they work on either.
 */
export type RedisClient = Redis | Cluster
