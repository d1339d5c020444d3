import { randomBytes } from 'node:crypto'
import t from 'tap'
import { Redis } from 'ioredis'
import { decodeJwt } from 'jose'
import { AddressHasher } from '../../../lib/receipts/address-hash.js'
import { RECEIPT_CLOCK_TOLERANCE_SECONDS, ReceiptIssuer } from '../../../lib/receipts/receipt-issuer.js'
import { Receipts } from '../../../lib/receipts/receipts.js'
import { deriveReceiptSigningKeys, prepareSigningKeys } from '../../../lib/receipts/signing-keys.js'
import { tenantScope } from '../../../lib/keys/scope.js'
import { MemoryRedemptionStore } from '../../../lib/state/memory/redemption-store.js'
import { redemptionKey } from '../../../lib/state/redis/keys.js'
import { RedisRedemptionStore } from '../../../lib/state/redis/redemption-store.js'
import type { RedemptionStore } from '../../../lib/state/redemptions.js'
import { registryFromJson } from '../../../lib/tenants-file/load.js'
import { generateKey, hashKey } from '../../../lib/keys/api-keys.js'
import type { TenantKey } from '../../../lib/tenants/tenant.js'
import { redisTestOptions, startRedis } from '../../support/redis.js'

const TTL_SECONDS = 300

/** acme's live secret key, as the registry makes it. */
function acmeLiveKey (): TenantKey {
  const secret = generateKey('secret', 'live')
  const registry = registryFromJson({
    tiers: { t: { allowance: 1, window: '1d', sandboxAllowance: 1 } },
    tenants: [{ id: 'acme', tier: 't', keys: [{ id: 'acme_live', kind: 'secret', mode: 'live', sha256: hashKey(secret) }] }]
  })
  const key = registry.authenticate(secret, Date.now())
  if (key === null) throw new Error('the key does not authenticate')
  return key
}

async function receiptsOn (redemptions: RedemptionStore): Promise<{ receipts: Receipts, issuer: ReceiptIssuer }> {
  const issuer = new ReceiptIssuer({ keys: await prepareSigningKeys(await deriveReceiptSigningKeys([{ id: 'k1', secret: randomBytes(32) }])), issuer: 'https://otp.example.com', ttlSeconds: TTL_SECONDS })
  return { receipts: new Receipts(issuer, new AddressHasher(randomBytes(32)), redemptions), issuer }
}

t.test('memory: a receipt redeemed once is refused until it has expired beyond the clock tolerance', async (t) => {
  let nowMs = Date.parse('2026-01-01T00:00:00Z')
  const redemptions = new MemoryRedemptionStore({ now: () => nowMs })
  t.teardown(async () => { await redemptions.close() })
  const { receipts, issuer } = await receiptsOn(redemptions)
  const key = acmeLiveKey()
  const epoch = await redemptions.epoch()
  const receipt = issuer.issue({ tenant: 'acme', mode: 'live', requestId: 'otp_abcdefghijklmnopqrstuv', addressHash: receipts.addressHash(key.tenant, 'ada@example.com'), epoch }, nowMs)
  const expMs = (decodeJwt(receipt).exp ?? 0) * 1000

  // Redeemed late in its life, so that a mark kept only until `exp` would lapse first.
  nowMs = expMs - 1000
  t.match(await receipts.redeem(key, receipt, undefined, nowMs), { ok: true }, 'redeemed a second before its expiry')
  for (const afterExpMs of [1, RECEIPT_CLOCK_TOLERANCE_SECONDS * 1000 - 1]) {
    nowMs = expMs + afterExpMs
    t.match(await receipts.redeem(key, receipt, undefined, nowMs), { ok: false, refusal: 'already_redeemed' }, `${afterExpMs} ms past exp, within the clock tolerance (still accepted as unexpired): refused as redeemed`)
  }
  nowMs = expMs + RECEIPT_CLOCK_TOLERANCE_SECONDS * 1000
  t.match(await receipts.redeem(key, receipt, undefined, nowMs), { ok: false, refusal: 'expired' }, 'at the end of the tolerance: expired')
})

t.test('redis: the redemption mark outlives the receipt by more than the clock tolerance', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  const client = new Redis(server.url)
  t.teardown(() => { client.disconnect() })
  const redemptions = new RedisRedemptionStore(client)
  const { receipts, issuer } = await receiptsOn(redemptions)
  const key = acmeLiveKey()
  const scope = tenantScope('acme', 'live')
  const issuedAtMs = Date.now()
  const receipt = issuer.issue({ tenant: 'acme', mode: 'live', requestId: 'otp_abcdefghijklmnopqrstuv', addressHash: receipts.addressHash(key.tenant, 'ada@example.com'), epoch: await redemptions.epoch(scope) }, issuedAtMs)
  const { exp, jti } = decodeJwt(receipt)
  const redeemedAtMs = Date.now()
  t.match(await receipts.redeem(key, receipt, undefined, redeemedAtMs), { ok: true })
  // Redis's clock cannot be moved: the mark's time to live is read instead. It must reach past
  // the last moment the receipt is still accepted (exp plus the tolerance), counted from the
  // redemption; the moments since only shorten what is left.
  const leftMs = await client.pttl(redemptionKey(scope, jti ?? ''))
  const neededMs = (exp ?? 0) * 1000 + RECEIPT_CLOCK_TOLERANCE_SECONDS * 1000 - Date.now()
  t.ok(leftMs > neededMs, `the mark lives ${leftMs} ms more, past the ${neededMs} ms until the receipt is refused as expired`)
  t.match(await receipts.redeem(key, receipt, undefined, redeemedAtMs), { ok: false, refusal: 'already_redeemed' })
})
