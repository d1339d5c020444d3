/** A tenant's turn; `release` says how long the work took. */
export interface TenantTurn {
  release: (tookMs: number) => void
}

interface Account {
  running: boolean
  /** Time the tenant may still spend, in ms; negative after a costly turn. */
  credit: number
  /** When `credit` was last brought up to date. */
  at: number
}

/**
 * A share of this process's time per tenant, for work that a tenant can ask for at will (a
 * token bucket of milliseconds): one turn at a time, each charged what it took, the credit
 * growing back at `share` of the elapsed time up to `burstMs`. A tenant whose credit is spent
 * waits until it is positive again: however often it asks, its work takes at most `share` of
 * the process's time after the burst. Refused requests are not queued, so a tenant's flood
 * costs others nothing but the refusals. One entry per tenant that asked: bounded by the tenants.
 */
export class TenantTimeShare {
  readonly #share: number
  readonly #burstMs: number
  readonly #now: () => number
  readonly #accounts = new Map<string, Account>()

  constructor (share: number, burstMs: number, now: () => number = () => performance.now()) {
    this.#share = share
    this.#burstMs = burstMs
    this.#now = now
  }

  /** The tenant's turn; or how long until it may ask again (ms; 0 while its previous turn runs). */
  acquire (tenantId: string): TenantTurn | { retryInMs: number } {
    const account = this.#accounts.get(tenantId) ?? { running: false, credit: this.#burstMs, at: this.#now() }
    this.#accounts.set(tenantId, account)
    this.#refill(account)
    if (account.running) return { retryInMs: 0 }
    if (account.credit <= 0) return { retryInMs: -account.credit / this.#share }
    account.running = true
    let released = false
    return {
      release: (tookMs) => {
        if (released) return
        released = true
        this.#refill(account)
        account.credit -= Math.max(0, tookMs)
        account.running = false
      }
    }
  }

  #refill (account: Account): void {
    const now = this.#now()
    account.credit = Math.min(this.#burstMs, account.credit + (now - account.at) * this.#share)
    account.at = now
  }
}
