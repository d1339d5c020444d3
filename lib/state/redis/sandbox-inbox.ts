import type { RedisClient } from './client.js'
import { defineKeyedScript, type KeyedScript } from './keyed-script.js'
import { sandboxEntriesKey, sandboxEntriesKeyPrefix, sandboxKey, sandboxPiecesKey, sandboxShareKeys } from './keys.js'
import { redisClock, type RedisClock } from './fence.js'
import { storeCall } from '../../store-errors.js'
import { CodePieces, type BodyPieces } from '../../code-pieces.js'
import { isFresh, SANDBOX_ADDRESSES_PER_TENANT, SANDBOX_MESSAGES_PER_ADDRESS, SANDBOX_RETENTION_MS, SANDBOX_SIZE_PER_TENANT, type SandboxInbox, type SandboxMessage } from '../sandbox-inbox.js'
import { packArgs, type PackedArgs } from './script-args.js'
import { SANDBOX_ADD_ARGS, SANDBOX_ADD_LUA } from './scripts.js'
import { decodeJsonSandboxEntry, decodeSandboxEntry, encodeSandboxEntry } from './sandbox-entry.js'

/** The box, the share's three counters, and the pieces the entry names (none to two). */
const ADD_MAX_KEYS = 6

const newestFirst = (a: SandboxMessage, b: SandboxMessage): number => Date.parse(b.createdAt) - Date.parse(a.createdAt)

export interface RedisSandboxShare {
  addressesPerTenant?: number
  /** Bytes of the stored entries. */
  bytesPerTenant?: number
  /** How long a box lasts after its last write. */
  retentionMs?: number
}

/**
 * One capped, expiring list per tenant and address, shared by every instance, and each
 * tenant's share of them bounded as in process (SANDBOX_ADDRESSES_PER_TENANT,
 * SANDBOX_SIZE_PER_TENANT in bytes).
 */
export class RedisSandboxInbox implements SandboxInbox {
  readonly #client: RedisClient
  readonly #clock: RedisClock
  readonly #add: KeyedScript
  readonly #bounds: { perAddress: number, retentionMs: number, maxAddresses: number, maxBytes: number }

  constructor (client: RedisClient, { addressesPerTenant = SANDBOX_ADDRESSES_PER_TENANT, bytesPerTenant = SANDBOX_SIZE_PER_TENANT, retentionMs = SANDBOX_RETENTION_MS }: RedisSandboxShare = {}) {
    this.#add = defineKeyedScript(client, 'emailOtpSandboxAdd', SANDBOX_ADD_LUA, ADD_MAX_KEYS)
    this.#client = client
    this.#clock = redisClock(client)
    this.#bounds = { perAddress: SANDBOX_MESSAGES_PER_ADDRESS, retentionMs, maxAddresses: addressesPerTenant, maxBytes: bytesPerTenant }
  }

  async add (tenantId: string, message: SandboxMessage, pieces?: BodyPieces): Promise<void> {
    const address = message.to.toLowerCase()
    const { boxes, bytes, total } = sandboxShareKeys(tenantId)
    const text = pieces?.text?.stored ?? null
    const html = pieces?.html?.stored ?? null
    const named = [text, html].filter((stored) => stored !== null)
    const packedWith = (pieceValues: string[]): PackedArgs => packArgs(SANDBOX_ADD_ARGS, {
      box: sandboxEntriesKey(tenantId, address),
      boxes,
      bytes,
      total,
      pieces: named.map((stored) => sandboxPiecesKey(tenantId, stored.id)),
      entry,
      address,
      boxPrefix: sandboxEntriesKeyPrefix(tenantId),
      ...this.#bounds,
      pieceValues: pieceValues.map((value) => ({ value }))
    })
    const entry = encodeSandboxEntry(message, { text: text?.id ?? null, html: html?.id ?? null })
    const add = async ({ keys, args }: PackedArgs): Promise<unknown> => await this.#add(keys, [...args, await this.#clock.deadline()])
    await storeCall('sandbox inbox write', async () => {
      // The pieces go along only when Redis lacks one: once a minute per part, not per message.
      // All of them then, so that the second call cannot miss one that expired in between.
      const missing = await add(packedWith(named.map(() => '')))
      if (Array.isArray(missing)) await add(packedWith(named.map((stored) => stored.value)))
    })
  }

  async list (tenantId: string, address: string): Promise<SandboxMessage[]> {
    const [stored, earlier] = await storeCall('sandbox inbox read', async () => await Promise.all([
      this.#client.lrange(sandboxEntriesKey(tenantId, address), 0, SANDBOX_MESSAGES_PER_ADDRESS - 1),
      this.#client.lrange(sandboxKey(tenantId, address), 0, SANDBOX_MESSAGES_PER_ADDRESS - 1)
    ]))
    const now = Date.now()
    const entries = stored.flatMap((entry) => decodeSandboxEntry(entry) ?? []).filter((entry) => isFresh(entry.message, now))
    const ids = [...new Set(entries.flatMap((entry) => [entry.textPieces ?? [], entry.htmlPieces ?? []].flat()))]
    const values = ids.length === 0 ? [] : await storeCall('sandbox inbox read', async () => await this.#client.mget(ids.map((id) => sandboxPiecesKey(tenantId, id))))
    const piecesById = new Map(ids.map((id, index) => [id, CodePieces.fromStored(values[index] ?? '')]))
    // An entry whose pieces are gone (it outlived them by a clock's skew) is listed no longer.
    const splice = (id: string | null, kept: string, code: string): string | null => {
      if (id === null) return kept
      return piecesById.get(id)?.splice(code) ?? null
    }
    const messages = entries.flatMap(({ message, textPieces, htmlPieces }) => {
      const text = splice(textPieces, message.text, message.code)
      const html = splice(htmlPieces, message.html, message.code)
      return text === null || html === null ? [] : [{ ...message, text, html }]
    })
    if (earlier.length > 0) messages.push(...earlier.flatMap((entry) => decodeJsonSandboxEntry(entry) ?? []).filter((message) => isFresh(message, now)))
    return messages.sort(newestFirst).slice(0, SANDBOX_MESSAGES_PER_ADDRESS)
  }
}
