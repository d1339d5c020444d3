import { closeSync, openSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { generateKey, hashKey } from '../../lib/tenants/api-keys.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { freePort } from '../../test/support/redis.js'
import { startNodeChild, type NodeChild, type Resources } from './children.js'
import type { NextRequest } from './load.js'

// Compiled to .bench-build/bench/support/; the service is the one `npm run build` put in dist/.
export const ROOT = fileURLToPath(new URL('../../..', import.meta.url))

/** Limits and lockout far above anything a benchmark reaches: it measures work, not refusals. */
export const NO_LIMIT = '100000000/1m'
const NO_LOCKOUT = '100000000'

/** The environment of every child process; nothing is inherited, so a REDIS_URL in the shell cannot leak in. */
export const BASE_ENV: Readonly<Record<string, string>> = { PATH: process.env.PATH ?? '', NODE_ENV: 'production', HOST: '127.0.0.1' }

export interface BenchTenant {
  /** Environment shared by every email-otp process of the run (same tenants file, same HMAC key). */
  env: Record<string, string>
  liveKey: string
  hmacSecret: Buffer
  /** The tenants file's content, for services built in the benchmark's own process. */
  document: TenantsFile
}

/** The tenants file of one tenant `bench` with one live secret key, an allowance and limits that never bind. */
export function benchTenantsDocument (liveKey: string): TenantsFile {
  return {
    tiers: { bench: { allowance: 100_000_000, window: '1d', sandboxAllowance: 100_000_000 } },
    tenants: [{
      id: 'bench',
      tier: 'bench',
      keys: [{ id: 'k_live', kind: 'secret', mode: 'live', sha256: hashKey(liveKey) }],
      limits: { recipient: NO_LIMIT, source: NO_LIMIT, key: NO_LIMIT }
    }]
  }
}

/** The bench tenant, its tenants file written in `dir`, and the environment of the services. */
export function benchTenant (dir: string): BenchTenant {
  const liveKey = generateKey('secret', 'live')
  const hmacSecret = randomBytes(32)
  const tenantsFile = join(dir, 'tenants.json')
  const document = benchTenantsDocument(liveKey)
  writeFileSync(tenantsFile, JSON.stringify(document))
  const env = {
    ...BASE_ENV,
    TENANTS_FILE: tenantsFile,
    LOG_LEVEL: 'warn',
    OTP_HMAC_KEYS: `k1:${hmacSecret.toString('base64')}`,
    RATE_LIMIT_RECIPIENT: NO_LIMIT,
    RATE_LIMIT_SOURCE: NO_LIMIT,
    RATE_LIMIT_KEY: NO_LIMIT,
    RATE_LIMIT_MAILBOX: NO_LIMIT,
    RATE_LIMIT_ACCOUNT: NO_LIMIT,
    RATE_LIMIT_PUBLIC: NO_LIMIT,
    LOCKOUT_THRESHOLD: NO_LOCKOUT,
    // The load generator is one source address opening up to 200 connections.
    MAX_CONNECTIONS_PER_SOURCE: '0',
    SHUTDOWN_GRACE_MS: '2000'
  }
  return { env, liveKey, hmacSecret, document }
}

export interface Service {
  child: NodeChild
  /** The file the service's stdout (and so the log mailer) appends to. */
  mailLog: string
}

/** Starts `node [nodeArgs] dist/server.js` on a free port; registers its stop with `resources`. */
export async function startService (resources: Resources, options: { name: string, dir: string, env: Record<string, string>, nodeArgs?: string[] }): Promise<Service> {
  const port = await freePort()
  const mailLog = join(options.dir, `${options.name.replace(/\W+/g, '-')}.mail.log`)
  const fd = openSync(mailLog, 'a')
  try {
    const child = await startNodeChild({
      name: options.name,
      args: [...(options.nodeArgs ?? []), 'dist/server.js'],
      cwd: ROOT,
      env: { ...options.env, PORT: String(port) },
      port,
      stdout: fd,
      readyPath: '/readyz',
      readyStatus: 200
    })
    resources.add(child.stop)
    return { child, mailLog }
  } finally {
    // The child has its own descriptor.
    closeSync(fd)
  }
}

let addressSeq = 0
/** Every dispatch goes to an address never used before, so per-recipient state is always new. */
export function nextAddress (): string {
  return `bench.user${++addressSeq}@example.com`
}

export function dispatchRequest (): NextRequest {
  return { body: JSON.stringify({ email: nextAddress() }), expected: 200 }
}

export interface Token {
  requestId: string
  code: string
}

/** Each token once, in order: even ones with the right code (200), odd ones with a wrong one (400). */
export function verifyRequests (tokens: readonly Token[]): () => NextRequest {
  let index = 0
  return () => {
    const token = tokens[index]
    if (token === undefined) throw new Error('verify pool exhausted')
    const right = index++ % 2 === 0
    const guess = right ? token.code : String((Number(token.code) + 1) % 1_000_000).padStart(6, '0')
    return { body: JSON.stringify({ requestId: token.requestId, userGuess: guess }), expected: right ? 200 : 400 }
  }
}
