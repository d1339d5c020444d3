/** One host:port of REDIS_SENTINELS or REDIS_CLUSTER_NODES. */
export interface RedisNode {
  host: string
  port: number
}

/** Credentials and TLS for the servers of a Sentinel or Cluster set-up (a URL carries its own). */
export interface RedisAccess {
  username: string | null
  password: string | null
  tls: boolean
}

/** Where Redis is: exactly one of REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES. */
export type RedisTopology =
  | { kind: 'single', url: string }
  | ({ kind: 'sentinel', sentinels: RedisNode[], name: string } & RedisAccess)
  | ({ kind: 'cluster', nodes: RedisNode[] } & RedisAccess)
