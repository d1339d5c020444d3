import { apiError } from '../errors.js'
import { isSandbox } from '../keys/api-keys.js'
import { describeEmailRejection, validateEmail } from '../recipients/address.js'
import type { TenantKey } from '../tenants/tenant.js'
import type { SandboxInbox, SandboxMessage } from '../state/sandbox-inbox.js'

/** What sandbox keys sent, as their tenant reads it back (GET /sandbox/messages). */
export class SandboxMessages {
  readonly #inbox: SandboxInbox

  constructor (inbox: SandboxInbox) {
    this.#inbox = inbox
  }

  /** The messages `key`'s tenant sent to `email`, newest first; only one dispatch's when `requestId` is given. */
  async list (key: TenantKey, email: string, requestId?: string): Promise<SandboxMessage[]> {
    // A live key has no sandbox: the resource does not exist for it.
    if (!isSandbox(key.mode)) throw apiError('NOT_FOUND', 'The sandbox inbox is only available to sandbox (test) keys')
    const checked = validateEmail(email)
    if (!checked.ok) throw apiError('INVALID_EMAIL', describeEmailRejection(checked.reason))
    const messages = await this.#inbox.list(key.tenant.id, checked.email.address)
    return requestId === undefined ? messages : messages.filter((message) => message.requestId === requestId)
  }
}
