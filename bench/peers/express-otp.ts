/*
 * The usual hand-rolled alternative, written the straightforward way: Express 5,
 * express-rate-limit on a rate-limit-redis store, ioredis. Same endpoints and answers as
 * email-otp, and the same work a careful team would do: the bearer key checked against its
 * SHA-256, per-source limits on both routes and a per-recipient limit on dispatch (limits as
 * high as the benchmark sets ours), a daily quota counter, the code stored as its
 * HMAC-SHA256 under a server secret and consumed once (GETDEL), compared in constant time.
 * Started by bench/run.ts in its own process with PORT, REDIS_URL, PEER_KEY_SHA256 (hex
 * SHA-256 of the accepted bearer key) and PEER_HMAC_SECRET.
 */
import { createHash, createHmac, createSecretKey, randomBytes, randomInt, timingSafeEqual, type KeyObject } from 'node:crypto'
import { Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import express, { type NextFunction, type Request, type Response } from 'express'
import { rateLimit } from 'express-rate-limit'
import { RedisStore, type RedisReply } from 'rate-limit-redis'
import { Redis } from 'ioredis'

const CODE_TTL_SECONDS = 600
const LIMIT_PER_MINUTE = 100_000_000
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/
const QUOTA_PER_DAY = 1_000_000_000

/** Where a code lives in Redis; bench/run.ts seeds verify traffic through these two. */
export function peerTokenKey (requestId: string): string {
  return `peer:otp:${requestId}`
}

/**
 * The stored form of a code: HMAC-SHA256 under the server secret. The key is a KeyObject made
 * once, as careful code does: on Node 24 a string or Buffer key costs ~8 µs more per call,
 * and the peer is not to lose on a detail the service fixed for itself.
 */
export function peerCodeDigest (secret: KeyObject, requestId: string, code: string): string {
  return createHmac('sha256', secret).update(`${requestId}:${code}`).digest('hex')
}

function start (): void {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379')
  const keyHash = Buffer.from(process.env.PEER_KEY_SHA256 ?? '', 'hex')
  const hmacSecret = createSecretKey(Buffer.from(process.env.PEER_HMAC_SECRET ?? '', 'base64'))
  // "Sending": the message is written to a sink that drops it, as a mail client would hand it off.
  const outbox = new Writable({ write (_chunk, _encoding, callback) { callback() } })

  const limiter = (prefix: string, keyGenerator?: (request: Request) => string): express.RequestHandler => rateLimit({
    windowMs: 60_000,
    limit: LIMIT_PER_MINUTE,
    standardHeaders: 'draft-7',
    legacyHeaders: false,
    ...(keyGenerator === undefined ? {} : { keyGenerator }),
    store: new RedisStore({ prefix, sendCommand: async (command: string, ...args: string[]) => await redis.call(command, ...args) as RedisReply })
  })

  function requireKey (request: Request, response: Response, next: NextFunction): void {
    const presented = /^Bearer (\S+)$/.exec(request.get('authorization') ?? '')?.[1]
    const digest = presented === undefined ? null : createHash('sha256').update(presented).digest()
    if (digest === null || digest.length !== keyHash.length || !timingSafeEqual(digest, keyHash)) {
      response.status(401).json({ success: false, message: 'Unauthorized', code: 'UNAUTHORIZED' })
      return
    }
    next()
  }

  const app = express()
  app.disable('x-powered-by')
  app.use(express.json({ limit: '4kb' }))
  app.use(requireKey)
  app.use(limiter('rl:source:'))

  app.post('/otp/request', limiter('rl:recipient:', (request) => String(request.body?.email).toLowerCase()), async (request, response) => {
    const email: unknown = request.body?.email
    if (typeof email !== 'string' || email.length > 254 || !EMAIL.test(email)) {
      response.status(400).json({ success: false, message: 'Invalid email', code: 'INVALID_EMAIL' })
      return
    }
    const day = `peer:quota:${new Date().toISOString().slice(0, 10)}`
    const [[, used] = []] = await redis.multi().incr(day).expire(day, 2 * 86_400).exec() ?? []
    if (Number(used) > QUOTA_PER_DAY) {
      response.status(402).json({ success: false, message: 'Quota exceeded', code: 'QUOTA_EXCEEDED' })
      return
    }
    const code = randomInt(0, 1_000_000).toString().padStart(6, '0')
    const requestId = 'otp_' + randomBytes(18).toString('base64url')
    await redis.set(peerTokenKey(requestId), peerCodeDigest(hmacSecret, requestId, code), 'EX', CODE_TTL_SECONDS)
    outbox.write(`To: ${email}\nSubject: Your verification code\n\nYour verification code is ${code}. It expires in 10 minutes.\n`)
    response.json({ success: true, message: 'Verification code sent', data: { requestId } })
  })

  app.post('/otp/verify', async (request, response) => {
    const { requestId, userGuess } = (request.body ?? {}) as { requestId?: unknown, userGuess?: unknown }
    if (typeof requestId !== 'string' || typeof userGuess !== 'string') {
      response.status(400).json({ success: false, message: 'requestId and userGuess are required', code: 'INVALID_BODY' })
      return
    }
    const stored = await redis.getdel(peerTokenKey(requestId))
    const guessed = Buffer.from(peerCodeDigest(hmacSecret, requestId, userGuess.trim()), 'hex')
    if (stored === null || !timingSafeEqual(Buffer.from(stored, 'hex'), guessed)) {
      response.status(400).json({ success: false, message: 'The code is incorrect, expired or already used', code: 'CODE_MISMATCH' })
      return
    }
    response.json({ success: true, message: 'Code verified' })
  })

  app.listen(Number(process.env.PORT), '127.0.0.1')
}

// Imported by bench/run.ts for the two functions above; started as a script, it serves.
if (process.argv[1] === fileURLToPath(import.meta.url)) start()
