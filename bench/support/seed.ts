import { admissionPolicy } from '../../lib/admission/plan.js'
import type { Backend } from '../../lib/backend.js'
import { CodeSigner } from '../../lib/otp/signer.js'
import { OtpService, type Caller } from '../../lib/otp/service.js'
import { parseConfig } from '../../lib/config/from-env.js'
import { registryFromJson } from '../../lib/tenants-file/load.js'
import { AddressHasher } from '../../lib/receipts/address-hash.js'
import { NO_LIMIT, benchTenantsDocument, type Token } from './service.js'

const quiet = { info () {}, warn () {}, error () {} }

/**
 * Mints codes with the service's own OtpService over `backend` (admission, signing, token
 * write: the records and keys a running service would store), for the bench tenant and its
 * HMAC key. The mail is caught here instead of sent, which is how the codes are known.
 */
export class CodeSeeder {
  readonly #service: OtpService
  readonly #caller: Caller
  readonly #codes = new Map<string, string>()

  constructor (backend: Backend, liveKey: string, hmacSecret: Buffer) {
    const registry = registryFromJson(benchTenantsDocument(liveKey))
    const key = registry.authenticate(liveKey, Date.now())
    if (key === null) throw new Error('the bench key does not authenticate')
    const config = parseConfig({ RATE_LIMIT_RECIPIENT: NO_LIMIT, RATE_LIMIT_SOURCE: NO_LIMIT, RATE_LIMIT_KEY: NO_LIMIT, RATE_LIMIT_MAILBOX: 'off', LOCKOUT_THRESHOLD: '100000000' })
    this.#caller = { key, address: '127.0.0.1', log: quiet }
    const hmacKeys = [{ id: 'k1', secret: hmacSecret }]
    const hasher = new AddressHasher(hmacKeys)
    this.#service = new OtpService({
      policy: admissionPolicy(config),
      signer: new CodeSigner(hmacKeys),
      backend,
      mailer: { send: async (_message, context) => { this.#codes.set(context.requestId, context.code); return 'bench' } },
      defaults: { ttlSeconds: config.otpTtlSeconds, mailFrom: config.mailFrom },
      suppressionMs: config.suppressionMs,
      ipv6BucketPrefix: config.ipv6BucketPrefix,
      observer: { dispatched () {}, checked () {}, locked () {}, reviewed () {} },
      // The address hash goes into every record, as the service stores it; the seeder verifies nothing.
      receipts: { addressHash: (tenant, address) => hasher.hash(tenant, address), issue: async () => { throw new Error('the seeder only dispatches') } },
      events: { emit () {} }
    })
  }

  /** One code sent to `email`: its requestId and the code the mail carried. */
  async mint (email: string): Promise<Token> {
    const { requestId } = await this.#service.dispatch(this.#caller, { email })
    const code = this.#codes.get(requestId)
    if (code === undefined) throw new Error(`no mail caught for ${requestId}`)
    this.#codes.delete(requestId)
    return { requestId, code }
  }
}
