import { SANDBOX_MESSAGES_PER_ADDRESS, isFresh, type SandboxInbox, type SandboxMessage } from '../sandbox-inbox.js'

/**
 * Addresses whose messages one tenant keeps in process: past it (or past
 * MEMORY_CHARACTERS_PER_TENANT), that tenant's least recently written box goes, never another
 * tenant's (sandbox keys can be public, the demo key is).
 */
export const MEMORY_ADDRESSES_PER_TENANT = 1000
/**
 * Characters of messages one tenant keeps in process. A tenant's own templates can make a
 * message about 330,000 characters (a 64 KiB text part and a 256 KiB HTML part), so the count
 * of addresses alone would let one tenant hold several GB; 32 Mi characters keep at least a
 * hundred of the largest messages and thousands of ordinary ones.
 */
export const MEMORY_CHARACTERS_PER_TENANT = 32 * 1024 * 1024

function characters (message: SandboxMessage): number {
  return message.requestId.length + message.to.length + message.from.length + message.subject.length + message.text.length + message.html.length + message.code.length + message.createdAt.length
}

interface Box {
  messages: SandboxMessage[]
  characters: number
}

interface Share {
  /** In order of the last write: the first box is the one to forget first. */
  boxes: Map<string, Box>
  characters: number
}

export class MemorySandboxInbox implements SandboxInbox {
  readonly #shares = new Map<string, Share>()
  readonly #addressesPerTenant: number
  readonly #charactersPerTenant: number

  constructor (addressesPerTenant = MEMORY_ADDRESSES_PER_TENANT, charactersPerTenant = MEMORY_CHARACTERS_PER_TENANT) {
    this.#addressesPerTenant = addressesPerTenant
    this.#charactersPerTenant = charactersPerTenant
  }

  async add (tenantId: string, message: SandboxMessage): Promise<void> {
    let share = this.#shares.get(tenantId)
    if (share === undefined) {
      share = { boxes: new Map(), characters: 0 }
      this.#shares.set(tenantId, share)
    }
    const address = message.to.toLowerCase()
    const previous = share.boxes.get(address)
    const messages = [message, ...(previous?.messages ?? [])].slice(0, SANDBOX_MESSAGES_PER_ADDRESS)
    const box = { messages, characters: messages.reduce((sum, kept) => sum + characters(kept), 0) }
    if (previous !== undefined) {
      share.boxes.delete(address)
      share.characters -= previous.characters
    }
    share.boxes.set(address, box)
    share.characters += box.characters
    // The tenant's least recently written boxes go first, never another tenant's; the box just
    // written always stays.
    for (const [oldest, forgotten] of share.boxes) {
      if (share.boxes.size <= this.#addressesPerTenant && share.characters <= this.#charactersPerTenant) break
      if (oldest === address) break
      share.boxes.delete(oldest)
      share.characters -= forgotten.characters
    }
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const now = Date.now()
    return (this.#shares.get(tenantId)?.boxes.get(address.toLowerCase())?.messages ?? []).filter((message) => isFresh(message, now))
  }
}
