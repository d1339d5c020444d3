import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { createServices, type Services } from '../../lib/compose.js'
import { parseConfig } from '../../lib/config/from-env.js'
import type { Caller } from '../../lib/otp/service.js'
import type { RedisClient } from '../../lib/state/index.js'
import { NO_LIMIT, benchTenantsDocument, type Token } from './service.js'

const quiet = { info () {}, warn () {}, error () {}, child () { return quiet } }

/** What the log mailer prints, read for the newest code sent to each address. */
class CodeCatcher extends Writable {
  readonly codes = new Map<string, string>()

  override _write (chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    // One write may carry several messages: the log transport batches a turn's messages.
    for (const message of chunk.toString().split('----- email-otp log mailer').slice(1)) {
      const to = /^To: (.+)$/m.exec(message)?.[1]
      const code = /\b(\d{6})\b/.exec(message)?.[1]
      if (to !== undefined && code !== undefined) this.codes.set(to, code)
    }
    callback()
  }
}

/** Where the seeder keeps the codes: the embedded store (this process) or a Redis a service reads. */
export type SeedStore = { memoryStoreMaxTokens: number } | { redis: RedisClient }

/**
 * Mints codes with the service's own graph (createServices: admission, signing, token write,
 * the records and keys a running service would store), for the bench tenant and its HMAC key.
 * The log mailer's output is caught here, which is how the codes are known.
 */
export class CodeSeeder {
  readonly #services: Services
  readonly #caller: Caller
  readonly #catcher: CodeCatcher
  readonly #dir: string

  private constructor (services: Services, caller: Caller, catcher: CodeCatcher, dir: string) {
    this.#services = services
    this.#caller = caller
    this.#catcher = catcher
    this.#dir = dir
  }

  static async open (liveKey: string, hmacSecret: Buffer, store: SeedStore): Promise<CodeSeeder> {
    const dir = mkdtempSync(join(tmpdir(), 'email-otp-seed-'))
    const tenantsFile = join(dir, 'tenants.json')
    writeFileSync(tenantsFile, JSON.stringify(benchTenantsDocument(liveKey)))
    const config = parseConfig({
      TENANTS_FILE: tenantsFile,
      OTP_HMAC_KEYS: `k1:${hmacSecret.toString('base64')}`,
      RATE_LIMIT_RECIPIENT: NO_LIMIT,
      RATE_LIMIT_SOURCE: NO_LIMIT,
      RATE_LIMIT_KEY: NO_LIMIT,
      RATE_LIMIT_MAILBOX: 'off',
      LOCKOUT_THRESHOLD: '100000000',
      ...('memoryStoreMaxTokens' in store ? { MEMORY_STORE_MAX_TOKENS: String(store.memoryStoreMaxTokens) } : {})
    })
    const catcher = new CodeCatcher()
    let services: Services
    try {
      services = await createServices(config, { log: quiet, mailLog: catcher, redis: 'redis' in store ? store.redis : null })
    } catch (error) {
      rmSync(dir, { recursive: true, force: true })
      throw error
    }
    const key = services.tenants.current.authenticate(liveKey, Date.now())
    if (key === null) {
      await services.close()
      rmSync(dir, { recursive: true, force: true })
      throw new Error('the bench key does not authenticate')
    }
    return new CodeSeeder(services, { key, address: '127.0.0.1', log: quiet }, catcher, dir)
  }

  /** One code sent to `email`: its requestId and the code the mail carried. */
  async mint (email: string): Promise<Token> {
    const { requestId } = await this.#services.otp.dispatch(this.#caller, { email })
    const code = this.#catcher.codes.get(email)
    if (code === undefined) throw new Error(`no mail caught for ${requestId}`)
    this.#catcher.codes.delete(email)
    return { requestId, code }
  }

  /** Closes the services (the embedded store with them; a Redis connection stays its owner's). */
  async close (): Promise<void> {
    await this.#services.close()
    rmSync(this.#dir, { recursive: true, force: true })
  }
}
