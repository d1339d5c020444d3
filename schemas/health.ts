import { Type } from '@sinclair/typebox'

const Check = Type.Object({
  ok: Type.Boolean(),
  kind: Type.String(),
  reason: Type.Optional(Type.String({ description: 'Why the dependency is not usable, when that is known (for example a Redis maxmemory-policy that evicts keys).' }))
})

const StoreCheck = Type.Object({
  ok: Type.Boolean(),
  kind: Type.String(),
  reason: Type.Optional(Type.String({ description: 'Why the store is not usable, when that is known: a Redis maxmemory-policy that evicts keys, a setting that names a replica or the wrong kind of server…' })),
  replicas: Type.Optional(Type.Object({
    required: Type.Integer({ description: 'REDIS_REPLICA_ACKS.' }),
    connected: Type.Integer({ description: 'The fewest replicas connected to a Redis primary (any primary of a Cluster).' })
  }, { description: 'Only when REDIS_REPLICA_ACKS is set. Fewer connected than required: every write on that primary is undone and answers 503.' })),
  warnings: Type.Optional(Type.Array(Type.String(), { description: 'What works against the service without making it unready: too few replicas for REDIS_REPLICA_ACKS, a Cluster with cluster-require-full-coverage yes.' }))
})

const BlockListStatus = Type.Object({
  name: Type.String(),
  entries: Type.Integer(),
  loadedAt: Type.Union([Type.String(), Type.Null()]),
  ageSeconds: Type.Union([Type.Number(), Type.Null()]),
  lastError: Type.Union([Type.String(), Type.Null()])
})

const RefusedTenant = Type.Object({
  tenant: Type.String(),
  serving: Type.Union([Type.Literal('previous'), Type.Literal('none')], { description: '`previous`: served on its last good configuration; `none`: its keys answer 503 TENANT_MISCONFIGURED.' }),
  problems: Type.Array(Type.String(), { description: 'The JSON pointers of its problems in the tenants file (`email-otp tenants check` tells each rule).' })
})

export const ReadyReply = Type.Object({
  ready: Type.Boolean(),
  draining: Type.Optional(Type.Boolean({ description: 'True once the instance received SIGTERM: it serves out SHUTDOWN_DRAIN_MS, then closes. Only for callers with METRICS_TOKEN, and on the internal listener.' })),
  checks: Type.Optional(Type.Object({ tokenStore: StoreCheck, mailer: Check }, {
    description: 'Only for callers with METRICS_TOKEN, and on the internal listener.'
  })),
  blocklists: Type.Optional(Type.Array(BlockListStatus, {
    description: 'Size and age of each network block list; a list whose refresh fails keeps serving its last good version. Only for callers with METRICS_TOKEN, and on the internal listener.'
  })),
  tenants: Type.Optional(Type.Object({
    version: Type.Union([Type.String(), Type.Null()], { description: 'The tenants file in force (the first 16 hex digits of its SHA-256); null for the built-in demo tenant.' }),
    refused: Type.Array(RefusedTenant, { description: 'Tenants whose entry breaks a rule: refused alone, the others served. They do not make the instance unready.' })
  }, { description: 'Only for callers with METRICS_TOKEN, and on the internal listener.' }))
}, { $id: 'ReadyReply', description: 'Whether the token store and the mailer are usable; for callers with METRICS_TOKEN and on the internal listener, the state of each, of the block lists and of the tenants file (the tenants it refuses).' })

export const LiveReply = Type.Object({ ok: Type.Literal(true) }, { $id: 'LiveReply', description: 'The process answers.' })
