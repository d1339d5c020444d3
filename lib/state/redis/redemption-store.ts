import type { RedisClient } from './client.js'
import { redisClock, type RedisClock } from './fence.js'
import { ReplicaAcks } from './replica-acks.js'
import { storeCall, StoreUnavailableError, storeUndo } from '../../store-errors.js'
import { assertRedemption, newEpoch, type Redemption, type RedemptionStore } from '../redemptions.js'
import { epochKey, redemptionKey } from './keys.js'
import { packArgs } from './script-args.js'
import { RECEIPT_EPOCH_ARGS, RECEIPT_EPOCH_LUA, RECEIPT_REDEEM_ARGS, RECEIPT_REDEEM_LUA } from './scripts.js'

/** How long an instance trusts the epoch it read (it only changes when Redis lost its data). */
const EPOCH_CACHE_MS = 1000

type Command = (...keysAndArgs: string[]) => Promise<unknown>

/**
 * Redeemed receipts in Redis, shared by every instance: one script checks the receipt's epoch
 * and marks it (`SET key 1 PX ttl NX`) in one atomic step. The epoch of a scope lives in Redis
 * next to its redemptions, without expiry: if Redis loses its data (a restart without
 * persistence, a flush), the redemptions and the epoch go together, the next redeem or
 * receipt makes a new epoch, and every receipt of the old one is refused, so a lost
 * redemption record can never reopen a receipt. (An eviction policy could drop one mark and
 * keep the epoch: Redis must run with `noeviction`, as the README says.)
 */
export class RedisRedemptionStore implements RedemptionStore {
  readonly #epochCommand: Command
  readonly #redeemCommand: Command
  readonly #client: RedisClient
  readonly #clock: RedisClock
  readonly #acks: ReplicaAcks
  readonly #now: () => number
  /** Per scope: the epoch last read and when. As many entries as scopes. */
  readonly #epochs = new Map<string, { epoch: string, readAtMs: number }>()

  /** `acks`: the replicas that must hold a redemption before it answers (none when not given). */
  constructor (client: RedisClient, options: { now?: () => number, acks?: ReplicaAcks } = {}) {
    this.#now = options.now ?? Date.now
    this.#client = client
    this.#clock = redisClock(client)
    this.#acks = options.acks ?? new ReplicaAcks(client, { count: 0, timeoutMs: 0 })
    client.defineCommand('emailOtpReceiptEpoch', { lua: RECEIPT_EPOCH_LUA, numberOfKeys: RECEIPT_EPOCH_ARGS.keys.length })
    client.defineCommand('emailOtpReceiptRedeem', { lua: RECEIPT_REDEEM_LUA, numberOfKeys: RECEIPT_REDEEM_ARGS.keys.length })
    const methods = client as unknown as Record<string, Command | undefined>
    const epoch = methods.emailOtpReceiptEpoch
    const redeem = methods.emailOtpReceiptRedeem
    if (epoch === undefined || redeem === undefined) throw new Error('defineCommand did not add the receipt commands')
    this.#epochCommand = epoch.bind(client)
    this.#redeemCommand = redeem.bind(client)
  }

  /**
   * The scope's epoch, read at most once a second. A receipt is issued after its code was
   * consumed, so this never fails the verify: with Redis unreachable it answers the epoch last
   * read, or, never having read one, a new epoch Redis does not hold, whose receipt will be
   * refused at redemption rather than redeemable outside the rule.
   */
  async epoch (scope: string): Promise<string> {
    const cached = this.#epochs.get(scope)
    const now = this.#now()
    if (cached !== undefined && now - cached.readAtMs < EPOCH_CACHE_MS) return cached.epoch
    try {
      const { keys, args } = packArgs(RECEIPT_EPOCH_ARGS, { epochKey: epochKey(scope), newEpoch: newEpoch() })
      const epoch = String(await this.#epochCommand(...keys, ...args))
      this.#epochs.set(scope, { epoch, readAtMs: now })
      return epoch
    } catch {
      return cached?.epoch ?? newEpoch()
    }
  }

  async redeem (scope: string, jti: string, epoch: string | undefined, ttlMs: number): Promise<Redemption> {
    assertRedemption(scope, jti, ttlMs)
    const redemption = redemptionKey(scope, jti)
    const write = this.#acks.write(redemption)
    const { keys, args } = packArgs(RECEIPT_REDEEM_ARGS, { epochKey: epochKey(scope), redemptionKey: redemption, epoch: epoch ?? '', ttlMs, newEpoch: newEpoch() })
    const reply = await storeCall('receipt redemption', async () => await this.#redeemCommand(...keys, ...args, await this.#clock.deadline())).then(write.landed)
    const [outcome, current] = Array.isArray(reply) ? reply as [number, string] : []
    if (typeof current === 'string') this.#epochs.set(scope, { epoch: current, readAtMs: this.#now() })
    if (outcome === 1) {
      if (!await this.#acks.acknowledged([write])) {
        // A mark only the primary holds would be gone after a failover, and the receipt
        // redeemable again: it is taken back here too, and the caller retries.
        await storeUndo('receipt redemption undo', async () => await this.#client.del(redemption)).catch(() => {})
        throw new StoreUnavailableError('too few Redis replicas acknowledged the redemption')
      }
      return 'redeemed'
    }
    if (outcome === 2) return 'already_redeemed'
    if (outcome === 0) return 'other_epoch'
    throw new Error(`unexpected reply from the receipt redemption script: ${JSON.stringify(reply)}`)
  }

  /** The Redis client belongs to whoever opened it. */
  async close (): Promise<void> {}
}
