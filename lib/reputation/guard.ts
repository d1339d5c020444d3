import { pastThresholds, type ReputationCounts, type ReputationStore, type ReputationThresholds, type SendingPause } from '../state/reputation.js'
import type { Tenant } from '../tenants/tenant.js'
import type { EventSink } from '../webhooks/events.js'

/**
 * How often each instance reads the shared pauses: a dispatch asks this process's copy, never
 * Redis, so a pause set or lifted elsewhere (another instance, `email-otp tenants resume`)
 * takes effect here within this time. The instance that pauses a tenant knows at once.
 */
export const PAUSE_REFRESH_MS = 5000

export interface ReputationSettings extends ReputationThresholds {
  windowMs: number
  /** REPUTATION_WINDOW as written (`24h`), for the webhook. */
  windowSpec: string
}

export interface ReputationGuardOptions {
  store: ReputationStore
  /** Null: the guard is off; nothing is counted and no tenant is paused. */
  settings: ReputationSettings | null
  /** Partner reports (POST /recipients/suppress) count as bounces only where SES feedback does not already report them. */
  countPartnerReports: boolean
  tenant: (tenantId: string) => Tenant | undefined
  webhooks: Pick<EventSink, 'emit'>
  log: { info (fields: object, message: string): void, warn (fields: object, message: string): void, error (fields: object, message: string): void }
  /** A tenant's pause as this process sees it changed (the gauge). */
  changed?: (tenantId: string, paused: boolean) => void
  now?: () => number
  refreshMs?: number
}

/**
 * A tenant cannot spend the shared sending reputation: its live sends, permanent bounces and
 * complaints are counted over a rolling window, and once a rate reaches its threshold with at
 * least the minimum volume its live dispatches are refused until an operator resumes it or the
 * window's rates fall below the thresholds again (docs/reputation.md).
 */
export class ReputationGuard {
  readonly #options: ReputationGuardOptions
  readonly #now: () => number
  /** The pauses as this process last read them. */
  #paused = new Map<string, SendingPause>()
  /** Pauses this process set since the reading under way began: newer than that reading. */
  #pausedHere = new Map<string, SendingPause>()
  /** Tenants whose stored pause could not be read, already logged: once per such pause, not every refresh. */
  #unreadable = new Set<string>()
  #timer: NodeJS.Timeout | null = null
  #refreshing: Promise<void> | null = null

  constructor (options: ReputationGuardOptions) {
    this.#options = options
    this.#now = options.now ?? Date.now
  }

  /** Whether the tenant's live sending is paused, from this process's copy: no store round trip. */
  isPaused (tenantId: string): boolean {
    return this.#paused.has(tenantId)
  }

  /** A live mail left: counted in passing, never awaited. */
  sent (tenantId: string): void {
    if (this.#options.settings === null) return
    this.#options.store.count(tenantId, 'sent', this.#now())
  }

  /** SES reported a permanent bounce or a complaint of the tenant's live mail: counted, and the tenant paused if that took it past a threshold. */
  async feedback (tenantId: string, event: 'bounced' | 'complained'): Promise<void> {
    if (this.#options.settings === null) return
    this.#options.store.count(tenantId, event, this.#now())
    await this.#evaluate(tenantId)
  }

  /** The tenant reported a bounce or complaint of its own (POST /recipients/suppress with a live key). */
  async reported (tenantId: string): Promise<void> {
    if (!this.#options.countPartnerReports) return
    await this.feedback(tenantId, 'bounced')
  }

  /** Reads the shared pauses, lifts those whose window cleared, and keeps the rest for `isPaused`. */
  async refresh (): Promise<void> {
    this.#refreshing ??= this.#refresh().finally(() => { this.#refreshing = null })
    await this.#refreshing
  }

  /** Reads the pauses now (not waited for: start-up never waits on Redis) and then every PAUSE_REFRESH_MS, off the request path. */
  start (): void {
    if (this.#options.settings === null || this.#timer !== null) return
    const read = (): void => {
      this.refresh().catch((error: unknown) => { this.#options.log.warn({ err: error }, 'reading the sending pauses failed; the last reading stands') })
    }
    read()
    this.#timer = setInterval(read, this.#options.refreshMs ?? PAUSE_REFRESH_MS)
    this.#timer.unref()
  }

  async close (): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
    await this.#refreshing?.catch(() => {})
  }

  async #refresh (): Promise<void> {
    const { store, settings, log } = this.#options
    if (settings === null) return
    this.#pausedHere.clear()
    const nowMs = this.#now()
    const paused = await store.paused()
    this.#logUnreadable(paused)
    for (const tenantId of paused.keys()) {
      if (pastThresholds(await store.window(tenantId, nowMs), settings)) continue
      // Every instance may lift it; the one whose resume found the pause says so.
      if (await store.resume(tenantId, { forget: false, nowMs }) !== null) {
        log.info({ tenant: tenantId }, 'tenant live sending resumed: the window\'s rates fell below the thresholds')
      }
      paused.delete(tenantId)
    }
    for (const [tenantId, pause] of this.#pausedHere) if (!paused.has(tenantId)) paused.set(tenantId, pause)
    this.#adopt(paused)
  }

  async #evaluate (tenantId: string): Promise<void> {
    const { store, settings, tenant, webhooks, log } = this.#options
    if (settings === null) return
    await store.flush()
    const nowMs = this.#now()
    const counts = await store.window(tenantId, nowMs)
    if (!pastThresholds(counts, settings)) return
    const pause: SendingPause = { ...counts, sinceMs: nowMs }
    if (!await store.pause(tenantId, pause)) return
    this.#pausedHere.set(tenantId, pause)
    this.#adopt(new Map([...this.#paused, [tenantId, pause]]))
    const rates = ratesOf(counts)
    log.warn({ tenant: tenantId, ...counts, ...rates, window: settings.windowSpec }, 'tenant live sending paused: its bounce or complaint rate reached a threshold of the shared sending reputation')
    const known = tenant(tenantId)
    if (known === undefined) return
    webhooks.emit(known, 'live', 'tenant.sending_paused', {
      since: new Date(nowMs).toISOString(),
      window: settings.windowSpec,
      ...counts,
      ...rates,
      thresholds: { bounceRate: settings.bounceRate, complaintRate: settings.complaintRate, minSends: settings.minSends }
    })
  }

  #logUnreadable (paused: Map<string, SendingPause>): void {
    for (const [tenantId, { unreadable }] of paused) {
      if (unreadable === undefined || this.#unreadable.has(tenantId)) continue
      this.#unreadable.add(tenantId)
      this.#options.log.error({ tenant: tenantId, problem: unreadable }, 'a stored sending pause could not be read: the tenant counts as paused until its window clears or an operator resumes it')
    }
    for (const tenantId of this.#unreadable) if (paused.get(tenantId)?.unreadable === undefined) this.#unreadable.delete(tenantId)
  }

  #adopt (paused: Map<string, SendingPause>): void {
    const before = this.#paused
    this.#paused = paused
    for (const tenantId of paused.keys()) if (!before.has(tenantId)) this.#options.changed?.(tenantId, true)
    for (const tenantId of before.keys()) if (!paused.has(tenantId)) this.#options.changed?.(tenantId, false)
  }
}

function ratesOf ({ sent, bounced, complained }: ReputationCounts): { bounceRate: number, complaintRate: number } {
  return { bounceRate: sent === 0 ? 0 : bounced / sent, complaintRate: sent === 0 ? 0 : complained / sent }
}
