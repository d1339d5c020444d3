/**
 * Work waiting per tenant, served in rounds: `next` gives the front tenant's oldest item and
 * sends that tenant to the back of the round (or out of it, its queue empty), so a tenant
 * with one item waiting waits for one item of each other waiting tenant, however many those
 * have queued. Shared by the composition turns and the request turns.
 */
export class TenantQueues<T> {
  /** The tenants in the order they get their next item. */
  readonly #queues = new Map<string, T[]>()

  push (tenantId: string, item: T): void {
    const queue = this.#queues.get(tenantId)
    if (queue === undefined) this.#queues.set(tenantId, [item])
    else queue.push(item)
  }

  /** Whether the tenant has something waiting. */
  has (tenantId: string): boolean {
    return this.#queues.has(tenantId)
  }

  /** The tenant's oldest item, out of its turn: its place in the round stays as it was. */
  take (tenantId: string): T | undefined {
    const queue = this.#queues.get(tenantId)
    if (queue === undefined) return undefined
    const item = queue.shift()
    if (queue.length === 0) this.#queues.delete(tenantId)
    return item
  }

  /** Tenants with something waiting. */
  get tenants (): number {
    return this.#queues.size
  }

  /** Items waiting, all tenants together. */
  get size (): number {
    let count = 0
    for (const queue of this.#queues.values()) count += queue.length
    return count
  }

  next (): T | undefined {
    const front = this.#queues.entries().next()
    if (front.done === true) return undefined
    const [tenantId, queue] = front.value
    const item = queue.shift()
    this.#queues.delete(tenantId)
    if (queue.length > 0) this.#queues.set(tenantId, queue)
    return item
  }
}
