import { Writable } from 'node:stream'
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Test } from 'tap'
import app, { serverOptions } from '../app.js'
import { parseConfig } from '../lib/config/from-env.js'
import { generateKey, hashKey } from '../lib/keys/api-keys.js'
import { DEMO_SANDBOX_KEY } from '../lib/tenants-file/demo.js'
import type { TenantsFile } from '../schemas/tenants.js'
import { startRedis } from './support/redis.js'

/** Collects everything written to it, line by line. */
export class Capture extends Writable {
  text = ''
  override _write (chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.text += chunk.toString()
    callback()
  }

  get lines (): string[] {
    return this.text.split('\n').filter((line) => line !== '')
  }
}

/** Messages printed by the log mail transport. */
export class MailCapture extends Capture {
  /** The code of the newest message to `to`. */
  codeFor (to: string): string {
    const blocks = this.text.split('----- email-otp log mailer').filter((block) => block.includes(`To: ${to}\n`))
    const match = /\b(\d{6})\b/.exec(blocks.at(-1) ?? '')
    if (match?.[1] === undefined) throw new Error(`no mail to ${to}`)
    return match[1]
  }

  get count (): number {
    return this.text.split('----- email-otp log mailer').length - 1
  }
}

export const TEST_HMAC_KEYS = 'k1:' + Buffer.alloc(32, 7).toString('base64')

export interface TestApp {
  app: FastifyInstance
  mail: MailCapture
  logs: Capture
}

/**
 * Velocity limits out of the way of tests about something else; the abuse tests set their
 * own (and test the documented defaults explicitly).
 */
export const RELAXED_LIMITS = { RATE_LIMIT_RECIPIENT: '100000/1m', RATE_LIMIT_SOURCE: '100000/1m', RATE_LIMIT_KEY: '100000/1m', RATE_LIMIT_MAILBOX: 'off', RATE_LIMIT_ACCOUNT: '100000/1m', RATE_LIMIT_PREVIEW: '100000/1m', RATE_LIMIT_PUBLIC: '100000/1m' }

/** The operators' token of every test app (METRICS_TOKEN): it unlocks /metrics and /readyz details. */
export const TEST_METRICS_TOKEN = 'metrics-token-for-tests-0123456789'

/** GET /readyz as an operator sees it (with METRICS_TOKEN): the status and the details. */
export async function readiness (app: FastifyInstance): Promise<{ status: number, body: any }> {
  const answer = await app.inject({ method: 'GET', url: '/readyz', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  return { status: answer.statusCode, body: answer.json() }
}

/**
 * A Redis command timeout for a test that does not test it. The service's default (500 ms) is
 * a production figure; on a busy 2-core machine a test process or its redis-server can be off
 * the CPU for longer, and every script's fence (its deadline on Redis's clock, before the
 * timeout) is set earlier still when the clock offset was measured over a slow round trip: a
 * request would answer 503 for the machine's load, not for anything the test did. A test of
 * timeouts and fences sets REDIS_COMMAND_TIMEOUT_MS itself.
 */
export const TEST_REDIS_COMMAND_TIMEOUT = '5s'

/** The environment a test's service runs with: relaxed limits, a generous Redis timeout with REDIS_URL; `env` overrides both. */
export function testEnv (env: Record<string, string>): Record<string, string> {
  const redisTimeout: Record<string, string> = env.REDIS_URL !== undefined && env.REDIS_URL !== '' ? { REDIS_COMMAND_TIMEOUT_MS: TEST_REDIS_COMMAND_TIMEOUT } : {}
  return { ...RELAXED_LIMITS, ...redisTimeout, ...env }
}

/**
 * The app serves before its Redis connection is up (503 until then, by design: start-up never
 * waits on Redis), so a test's first request would race the connection on a busy machine.
 * Resolves once the client is ready, or has failed to connect (a test of an unreachable Redis
 * goes on at once).
 */
async function redisSettled (client: NonNullable<FastifyInstance['redis']>): Promise<void> {
  if (client.status === 'ready') return
  await new Promise<void>((resolve) => {
    const settle = (): void => {
      client.off('ready', settle)
      client.off('error', settle)
      resolve()
    }
    client.on('ready', settle)
    client.on('error', settle)
  })
}

/**
 * A fresh app per test, closed when the test ends. It does not listen unless asked to. With
 * Redis it is returned once connected, unless `awaitRedis` is false (a test of start-up).
 */
export async function buildApp (t: Test, env: Record<string, string> = {}, { awaitRedis = true } = {}): Promise<TestApp> {
  const config = parseConfig({ LOG_LEVEL: 'info', METRICS_TOKEN: TEST_METRICS_TOKEN, ...testEnv(env) })
  const mail = new MailCapture()
  const logs = new Capture()
  const fastify = Fastify(serverOptions(config, logs))
  await fastify.register(app, { config, mailLog: mail })
  t.teardown(async () => { await fastify.close() })
  await fastify.ready()
  if (awaitRedis && fastify.redis !== null) await redisSettled(fastify.redis)
  return { app: fastify, mail, logs }
}

export interface FixtureKeys {
  acmeLive: string
  acmeTest: string
  acmeBrowser: string
  acmeExpired: string
  acmeRevoked: string
  globexTest: string
}

/** Two tenants with keys of every kind, written to a tenants file in the test's directory. */
export function writeTenants (t: Test, mutate?: (file: TenantsFile) => void): { path: string, keys: FixtureKeys, file: TenantsFile } {
  const keys: FixtureKeys = {
    acmeLive: generateKey('secret', 'live'),
    acmeTest: generateKey('secret', 'test'),
    acmeBrowser: generateKey('restricted', 'live'),
    acmeExpired: generateKey('secret', 'live'),
    acmeRevoked: generateKey('secret', 'live'),
    globexTest: generateKey('secret', 'test')
  }
  const file: TenantsFile = {
    tiers: { standard: { allowance: 1000, window: '1d', sandboxAllowance: 100 } },
    tenants: [
      {
        id: 'acme',
        tier: 'standard',
        brand: { name: 'Acme' },
        keys: [
          { id: 'acme_live', kind: 'secret', mode: 'live', sha256: hashKey(keys.acmeLive) },
          { id: 'acme_test', kind: 'secret', mode: 'test', sha256: hashKey(keys.acmeTest) },
          { id: 'acme_browser', kind: 'restricted', mode: 'live', sha256: hashKey(keys.acmeBrowser), origins: ['app.acme.test', '*.acme.dev', 'http://localhost:5173'] },
          { id: 'acme_expired', kind: 'secret', mode: 'live', sha256: hashKey(keys.acmeExpired), expiresAt: '2020-01-01T00:00:00Z' },
          { id: 'acme_revoked', kind: 'secret', mode: 'live', sha256: hashKey(keys.acmeRevoked), revoked: true }
        ]
      },
      {
        id: 'globex',
        tier: 'standard',
        keys: [{ id: 'globex_test', kind: 'secret', mode: 'test', sha256: hashKey(keys.globexTest) }]
      }
    ]
  }
  mutate?.(file)
  // t.testdir() creates the directory and removes it after the test; a test that already
  // made one (with list files, say) keeps its files.
  if (!existsSync(t.testdirName)) t.testdir({})
  const path = join(t.testdirName, 'tenants.json')
  writeFileSync(path, JSON.stringify(file, null, 2))
  return { path, keys, file }
}

export function bearer (key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` }
}

const UNBOUNDED_WAIT_MS = 30_000

/**
 * Starts the app against a Redis topology that cannot be reached: start-up is bounded, the
 * service is not ready, and requests answer 503 quickly (never hang, never 500).
 */
export async function assertStartsUnavailable (t: Test, env: Record<string, string>): Promise<void> {
  const started = Date.now()
  // The service's default command timeout, which bounds its connect timeout, so start-up.
  const serviceDefault: Record<string, string> = env.REDIS_URL === undefined ? {} : { REDIS_COMMAND_TIMEOUT_MS: '500ms' }
  const { app } = await buildApp(t, { OTP_HMAC_KEYS: TEST_HMAC_KEYS, ...serviceDefault, ...env }, { awaitRedis: false })
  // What these bounds catch is a wait on Redis that never ends (a boot or an answer held until
  // Redis returns), not slowness: they sit far above any machine's speed, so a loaded one passes.
  t.ok(Date.now() - started < UNBOUNDED_WAIT_MS, `boot took ${Date.now() - started} ms`)
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 503, 'not ready')
  const asked = Date.now()
  const answer = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(DEMO_SANDBOX_KEY), payload: { email: 'a@example.com' } })
  t.same([answer.statusCode, answer.json().code], [503, 'UNAVAILABLE'])
  t.ok(Date.now() - asked < UNBOUNDED_WAIT_MS, `answered in ${Date.now() - asked} ms`)
}

/**
 * The environment of an app on the given store: none in memory; on Redis, a redis-server of the
 * test's own (stopped at its end) and the HMAC keys a Redis store requires.
 */
export async function storeEnv (t: Test, store: 'memory' | 'redis'): Promise<Record<string, string>> {
  if (store === 'memory') return {}
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  return { REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS }
}
