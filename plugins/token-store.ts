import fp from 'fastify-plugin'
import { CodeSigner } from '../lib/otp/signer.js'
import { MemoryTokenStore } from '../lib/tokens/memory-token-store.js'
import { RedisTokenStore } from '../lib/tokens/redis-token-store.js'
import type { TokenStore } from '../lib/tokens/token-store.js'

declare module 'fastify' {
  interface FastifyInstance {
    tokenStore: TokenStore
    codeSigner: CodeSigner
  }
}

export default fp(async function tokenStorePlugin (fastify) {
  const { config, redis } = fastify
  if (config.hmacKeyGenerated) {
    fastify.log.warn('OTP_HMAC_KEYS is not set: codes are signed with a key generated for this process only; set it in production')
  }
  const store: TokenStore = redis === null
    ? new MemoryTokenStore({ maxTokens: config.memoryStoreMaxTokens })
    : new RedisTokenStore(redis)
  fastify.decorate('tokenStore', store)
  fastify.decorate('codeSigner', new CodeSigner(config.hmacKeys))
  fastify.addHook('onClose', async () => { await store.close() })
}, { name: 'token-store', dependencies: ['config', 'redis'], fastify: '5.x' })
