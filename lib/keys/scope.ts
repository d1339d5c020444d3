import type { KeyMode } from './api-keys.js'

/**
 * The scope of one tenant's traffic in one mode, `acme:live`: live and sandbox never share a
 * counter. It is also the Redis Cluster hash tag (`{acme:live}`) of every key a dispatch or a
 * verify touches (token, velocity, lockout, quota, idempotency), which is what lets each run
 * as one script on one slot; those keys are built from this in lib/state/redis/keys.ts.
 */
export function tenantScope (tenantId: string, mode: KeyMode): string {
  return `${tenantId}:${mode}`
}
