/**
 * At most `perTenant` operations of one tenant at a time, in this process; the others are
 * refused at once (not queued), so a tenant's burst costs others nothing but the refusals.
 * Holds an entry only while a tenant has one running: its size is bounded by the tenants.
 */
export class TenantSlots {
  readonly #perTenant: number
  readonly #running = new Map<string, number>()

  constructor (perTenant: number) {
    this.#perTenant = perTenant
  }

  /** A slot for `tenantId`, released by calling the function returned (once); null when all are taken. */
  acquire (tenantId: string): (() => void) | null {
    const running = this.#running.get(tenantId) ?? 0
    if (running >= this.#perTenant) return null
    this.#running.set(tenantId, running + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      const left = (this.#running.get(tenantId) ?? 1) - 1
      if (left === 0) this.#running.delete(tenantId)
      else this.#running.set(tenantId, left)
    }
  }
}
