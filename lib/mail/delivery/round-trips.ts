import { randomInt } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'

/** The sends kept of each outcome, per tenant and for the whole process. */
export const SENDS_KEPT = 64

/** The last `capacity` durations. */
class Ring {
  readonly #durations: Float64Array
  #next = 0
  #size = 0

  constructor (capacity: number) {
    this.#durations = new Float64Array(capacity)
  }

  add (ms: number): void {
    this.#durations[this.#next] = ms
    this.#next = (this.#next + 1) % this.#durations.length
    this.#size = Math.min(this.#size + 1, this.#durations.length)
  }

  get size (): number {
    return this.#size
  }

  /** One of the kept durations; `index` below `size`. */
  at (index: number): number | null {
    return index < this.#size ? this.#durations[index] ?? null : null
  }
}

export interface RoundTripsOptions {
  /** An index below `count`, uniformly drawn. */
  pick?: (count: number) => number
  wait?: (ms: number) => Promise<void>
}

/** A tenant's (or the process's) last sends, accepted and refused apart. */
class Sends {
  readonly accepted = new Ring(SENDS_KEPT)
  readonly refused = new Ring(SENDS_KEPT)
}

/**
 * How long a tenant's live mail took lately in this process, and a wait drawn from it: what a
 * page's dispatch whose mail was refused or withheld (a suppressed mailbox, which must answer
 * as a failed delivery does) takes in all, so that the two answers come after the same time.
 * Both take the longer of an accepted send's time and a refusal's: a refused send waits out
 * what is left of an accepted send drawn at random (its own refusal is the other), a withheld
 * one waits the longer of an accepted send and a refusal, both drawn. So neither comes sooner
 * than a sent mail's answer would, whether the tenant's last refusal was a minute or a month
 * ago: imitating refusals alone fails for a healthy tenant, whose refusals are rare and old
 * while a probe is not (an SMTP relay refuses at RCPT, before the data, sooner than it accepts).
 *
 * Per tenant, so that no tenant's mail (a slow template, a tarpitting recipient) sets how long
 * another's answers wait; a tenant with no send of an outcome yet in this process draws from
 * every tenant's (the providers are the deployment's, not the tenant's), a process that has
 * accepted nothing yet takes its refusals for sends, and a process that has sent no live mail
 * yet has nothing to imitate and does not wait. Bounded: two small rings of numbers per tenant,
 * nothing per address.
 */
export class RoundTrips {
  readonly #tenants = new Map<string, Sends>()
  readonly #everyTenant = new Sends()
  readonly #pick: (count: number) => number
  readonly #wait: (ms: number) => Promise<void>

  constructor (options: RoundTripsOptions = {}) {
    this.#pick = options.pick ?? randomInt
    this.#wait = options.wait ?? (async (ms) => { await sleep(ms) })
  }

  /** A live send of `tenantId` took `ms`, and was accepted or not. */
  record (tenantId: string, ms: number, accepted: boolean): void {
    let kept = this.#tenants.get(tenantId)
    if (kept === undefined) {
      kept = new Sends()
      this.#tenants.set(tenantId, kept)
    }
    for (const sends of [kept, this.#everyTenant]) (accepted ? sends.accepted : sends.refused).add(ms)
  }

  /** How long an accepted send of `tenantId` takes now; null when this process has sent no live mail yet. */
  draw (tenantId: string): number | null {
    const own = this.#tenants.get(tenantId)
    return this.#drawFrom([own?.accepted, this.#everyTenant.accepted, own?.refused, this.#everyTenant.refused])
  }

  /** How long a refusal for `tenantId` takes now; null when this process has had none. */
  drawRefusal (tenantId: string): number | null {
    return this.#drawFrom([this.#tenants.get(tenantId)?.refused, this.#everyTenant.refused])
  }

  /**
   * Waits so that a failed dispatch of `tenantId` answers when a withheld or refused one does
   * (see above): `refusedAfterMs` is how long the provider took to refuse it; without it, the
   * send was withheld and nothing has been spent.
   */
  async imitate (tenantId: string, refusedAfterMs?: number): Promise<void> {
    const sent = this.draw(tenantId)
    if (sent === null) return
    const rest = refusedAfterMs === undefined ? Math.max(sent, this.drawRefusal(tenantId) ?? 0) : sent - refusedAfterMs
    if (rest > 0) await this.#wait(rest)
  }

  #drawFrom (rings: Array<Ring | undefined>): number | null {
    const ring = rings.find((candidate) => candidate !== undefined && candidate.size > 0)
    return ring === undefined ? null : ring.at(this.#pick(ring.size))
  }
}
