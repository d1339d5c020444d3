/*
 * The independent peer: better-auth with its email-OTP plugin, as its documentation sets it
 * up, on node:http (toNodeHandler), its rate limiter off so that the benchmark measures work,
 * not refusals. PEER_STORAGE=memory: everything in its memory adapter; PEER_STORAGE=redis:
 * the memory adapter for users and accounts, REDIS_URL as secondary storage (codes and
 * sessions), through better-auth's secondary storage interface. PEER_LOG=1 shows its log. Each code is written
 * to stdout as "address code", the mail it would send, which the benchmark reads to verify.
 * Its own package.json keeps better-auth's optional peers out of the service's tree:
 * `npm --prefix bench/peers/better-auth install` once before `npm run bench`.
 */
import { createServer } from 'node:http'
import { randomBytes } from 'node:crypto'
import { betterAuth } from 'better-auth'
import { memoryAdapter } from 'better-auth/adapters/memory'
import { emailOTP } from 'better-auth/plugins'
import { toNodeHandler } from 'better-auth/node'
import { Redis } from 'ioredis'

const port = Number(process.env.PORT)
const redis = process.env.PEER_STORAGE === 'redis' ? new Redis(process.env.REDIS_URL) : null
const secondaryStorage = redis === null
  ? undefined
  : {
      get: async (key) => await redis.get(key),
      // Codes are consumed with it (GETDEL): one use each, as in @better-auth/redis-storage.
      getAndDelete: async (key) => await redis.getdel(key),
      set: async (key, value, ttl) => { if (ttl) await redis.set(key, value, 'EX', ttl); else await redis.set(key, value) },
      delete: async (key) => { await redis.del(key) }
    }

const auth = betterAuth({
  baseURL: `http://127.0.0.1:${port}`,
  secret: randomBytes(32).toString('base64'),
  database: memoryAdapter({ user: [], session: [], account: [], verification: [] }),
  secondaryStorage,
  rateLimit: { enabled: false },
  logger: { disabled: process.env.PEER_LOG !== '1' },
  plugins: [emailOTP({
    expiresIn: 600,
    async sendVerificationOTP ({ email, otp }) {
      process.stdout.write(`${email} ${otp}\n`)
    }
  })]
})

createServer(toNodeHandler(auth)).listen(port, '127.0.0.1')
