import type { BodyPieces } from '../../code-pieces.js'
import { SANDBOX_ADDRESSES_PER_TENANT, SANDBOX_MESSAGES_PER_ADDRESS, SANDBOX_SIZE_PER_TENANT, isFresh, type SandboxInbox, type SandboxMessage } from '../sandbox-inbox.js'

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

  constructor (addressesPerTenant = SANDBOX_ADDRESSES_PER_TENANT, charactersPerTenant = SANDBOX_SIZE_PER_TENANT) {
    this.#addressesPerTenant = addressesPerTenant
    this.#charactersPerTenant = charactersPerTenant
  }

  /**
   * A part a tenant's template rendered is kept as its own splice of the minute's pieces, which
   * every message of the minute shares, not as the string that was sent: a transport that
   * encodes the sent string (the log transport prints it) makes V8 flatten it in place, and a
   * box holding it would then hold a copy of the whole part (64 KiB of text for the largest
   * templates), which the garbage collector moves on every pass while it lives.
   */
  async add (tenantId: string, sent: SandboxMessage, pieces?: BodyPieces): Promise<void> {
    const message = {
      ...sent,
      text: pieces?.text?.splice(sent.code) ?? sent.text,
      html: pieces?.html?.splice(sent.code) ?? sent.html
    }
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
