import fp from 'fastify-plugin'
import { AddressHasher } from '../lib/receipts/address-hash.js'
import { ReceiptIssuer } from '../lib/receipts/receipt-issuer.js'
import { Receipts } from '../lib/receipts/receipts.js'
import { deriveReceiptSigningKeys, prepareSigningKeys } from '../lib/receipts/signing-keys.js'

declare module 'fastify' {
  interface FastifyInstance {
    receipts: Receipts
  }
}

/**
 * Verification receipts: signing keys (RECEIPT_SIGNING_KEYS, else derived from OTP_HMAC_KEYS so
 * that every instance publishes and signs with the same keys), the issuer, the address hasher
 * and the store that makes each receipt redeem once.
 */
export default fp(async function receiptsPlugin (fastify) {
  const { config, backend } = fastify
  let material = config.receipts.signingKeys
  if (material === null) {
    material = await deriveReceiptSigningKeys(config.hmacKeys)
    if (config.hmacKeyGenerated) {
      fastify.log.warn('RECEIPT_SIGNING_KEYS is not set: receipts are signed with a per-process key, which changes on every restart (set RECEIPT_SIGNING_KEYS, or OTP_HMAC_KEYS)')
    } else {
      fastify.log.info('RECEIPT_SIGNING_KEYS is not set: receipts are signed with keys derived from OTP_HMAC_KEYS')
    }
  }
  const issuer = new ReceiptIssuer({ keys: await prepareSigningKeys(material), issuer: config.receipts.issuer, ttlSeconds: config.receipts.ttlSeconds })
  fastify.decorate('receipts', new Receipts(issuer, new AddressHasher(config.hmacKeys), backend.redemptions))
}, { name: 'receipts', dependencies: ['config', 'backend'], fastify: '5.x' })
