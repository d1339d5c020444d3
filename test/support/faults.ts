import type { Test } from 'tap'
import { Cluster, Redis } from 'ioredis'
import { bearer, type TestApp } from '../helper.js'
import { attemptUntil, until } from './wait.js'

/** A code the service answered 200 for, and what became of it. */
export interface Issued {
  requestId: string
  email: string
  code: string
  verified: boolean
}

/**
 * Load against an app whose Redis is made to fail, keeping what every answer said, so that
 * the state left in Redis can be checked against the answers afterwards: the tenant is
 * charged for exactly the dispatches answered 200 (their mail left), exactly the codes
 * answered 200 and not yet verified are in Redis, and every verify answered 503 verifies on
 * retry with the same code.
 */
export class FaultLoad {
  readonly #apps: readonly TestApp[]
  readonly #key: string
  readonly #mode: 'live' | 'test'
  readonly #tenant: string
  readonly #issued: Issued[] = []
  /** Codes whose verify answered 503: each must verify on retry. */
  readonly #unanswered: Issued[] = []
  /** Codes handed out for verifying and not yet answered. */
  readonly #taken = new Set<Issued>()
  readonly statuses = new Map<string, number>()
  /** How long each 503 took to come, in ms. */
  readonly unavailableMs: number[] = []
  #sequence = 0

  /**
   * `key` a secret key of `tenant` in `mode`. A sandbox (test) key's codes go to its inbox,
   * not the mail: they are counted, not verified. Several apps (instances of the service on one
   * Redis) take the requests in turn.
   */
  constructor (app: TestApp | readonly TestApp[], key: string, mode: 'live' | 'test' = 'live', tenant = 'acme') {
    this.#apps = Array.isArray(app) ? app : [app as TestApp]
    this.#key = key
    this.#mode = mode
    this.#tenant = tenant
  }

  /** The next instance in turn. */
  #app (): TestApp {
    const app = this.#apps[this.#sequence % this.#apps.length]
    if (app === undefined) throw new Error('FaultLoad needs an app')
    return app
  }

  #count (what: string, status: number, startedMs: number): void {
    if (status === 503) this.unavailableMs.push(Date.now() - startedMs)
    const name = `${what} ${status}`
    this.statuses.set(name, (this.statuses.get(name) ?? 0) + 1)
  }

  /** One dispatch to a mailbox of its own (so its code can be read from the mail). */
  async dispatch (): Promise<number> {
    const instance = this.#app()
    const email = `fault-${this.#tenant}-${this.#mode}-${this.#sequence++}@example.com`
    const startedMs = Date.now()
    const answer = await instance.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(this.#key), payload: { email } })
    this.#count('dispatch', answer.statusCode, startedMs)
    if (answer.statusCode === 200) {
      this.#issued.push({ requestId: answer.json().data.requestId, email, code: this.#mode === 'live' ? instance.mail.codeFor(email) : '', verified: false })
    }
    return answer.statusCode
  }

  /** Every code answered 200 so far, in the order of the answers. */
  get issuedCodes (): readonly Issued[] {
    return this.#issued
  }

  /** The codes issued and not yet verified nor being verified, taken out for verifying. */
  takeOutstanding (count: number): Issued[] {
    if (this.#mode === 'test') return []
    const taken = this.#issued.filter((issued) => !issued.verified && !this.#taken.has(issued) && !this.#unanswered.includes(issued)).slice(0, count)
    for (const issued of taken) this.#taken.add(issued)
    return taken
  }

  /** Verifies with the right code; a 503 leaves it for the retry check. */
  async verify (issued: Issued): Promise<number> {
    const startedMs = Date.now()
    const answer = await this.#app().app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(this.#key), payload: { requestId: issued.requestId, userGuess: issued.code } })
    this.#taken.delete(issued)
    this.#count('verify', answer.statusCode, startedMs)
    if (answer.statusCode === 200) issued.verified = true
    else if (answer.statusCode === 503) this.#unanswered.push(issued)
    return answer.statusCode
  }

  get issued (): number {
    return this.#issued.length
  }

  /**
   * Once Redis answers again: the invariants, read from Redis and /usage. `redis` reaches the
   * same server as the app: its URL, or a client of the same Cluster (live codes only).
   */
  async check (t: Test, redis: string | Cluster): Promise<void> {
    const { app } = this.#app()
    // The app's own connection runs what it sent while Redis was frozen before this PING.
    await until('Redis answering the app again', async () => await app.redis?.ping().then(() => true, () => false) ?? false)
    const usage = await app.inject({ method: 'GET', url: '/usage', headers: bearer(this.#key) })
    t.equal(usage.statusCode, 200)
    t.equal(usage.json().data[this.#mode === 'live' ? 'live' : 'sandbox'].used, this.#issued.length, `${this.#tenant} ${this.#mode}: charged exactly for the ${this.#issued.length} dispatches answered 200`)
    const inspect = typeof redis === 'string' ? new Redis(redis) : null
    try {
      const tokens: string[] = []
      // Consumed tokens are set aside under `<token>:used:<attempt>` until they expire.
      for (const server of inspect === null ? (redis as Cluster).nodes('master') : [inspect]) {
        for await (const keys of server.scanStream({ match: `otp:{${this.#tenant}:${this.#mode}}:*`, count: 1000 })) tokens.push(...(keys as string[]).filter((key) => !key.includes(':used:')))
      }
      const outstanding = this.#issued.filter((issued) => !issued.verified)
      t.equal(tokens.length, outstanding.length, `${this.#tenant} ${this.#mode}: a code in Redis for every dispatch answered 200 and not verified (${outstanding.length}), and no other`)
      if (this.#mode === 'test' && inspect !== null) {
        const messages = await inspect.eval(`local n = 0 for _, key in ipairs(redis.call('KEYS', 'sandbox-entries:{${this.#tenant}}:*')) do n = n + redis.call('LLEN', key) end return n`, 0)
        t.equal(messages, this.#issued.length, 'sandbox: an inbox message for every dispatch answered 200, and no other')
      }
    } finally {
      inspect?.disconnect()
    }
    // A 503 says "retry": a retry that meets the store still recovering is retried in turn.
    const retried = this.#unanswered.splice(0)
    const retries = await Promise.all(retried.map(async (issued) => {
      const answers = await attemptUntil('a verify answered other than 503', async () => await this.verify(issued), (status) => status !== 503)
      return answers.at(-1)
    }))
    this.#unanswered.splice(0)
    t.same(retries.filter((status) => status !== 200), [], `each of the ${retried.length} verifies answered 503 verifies on retry with the same code`)
    const again = this.#issued.filter((issued) => issued.verified).slice(0, 20)
    // A 503 (a busy machine's command timeout) says nothing either way: asked again until it decides.
    const replays = await Promise.all(again.map(async (issued) => {
      const replay = async (): Promise<number> => (await this.#app().app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(this.#key), payload: { requestId: issued.requestId, userGuess: issued.code } })).statusCode
      return (await attemptUntil('a replay answered other than 503', replay, (status) => status !== 503)).at(-1)
    }))
    t.same(replays.filter((status) => status !== 400), [], 'a verified code never verifies again')
  }
}
