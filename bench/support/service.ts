import { closeSync, openSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
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
  /** The same tenant with its own message templates (withTemplates), in a file of its own. */
  templatesFile: string
}

/** The tenants file of one tenant `bench` with one live secret key, an allowance that never binds and limits that never bind unless given. */
export function benchTenantsDocument (liveKey: string, limits: { recipient: string, source: string, key: string } = { recipient: NO_LIMIT, source: NO_LIMIT, key: NO_LIMIT }): TenantsFile {
  return {
    tiers: { bench: { allowance: 100_000_000, window: '1d', sandboxAllowance: 100_000_000 } },
    tenants: [{
      id: 'bench',
      tier: 'bench',
      keys: [{ id: 'k_live', kind: 'secret', mode: 'live', sha256: hashKey(liveKey) }],
      limits
    }]
  }
}

/**
 * The bench tenant's own message wording in English (the language of every bench dispatch):
 * a branded HTML layout with constants, a date and a plural, as a partner would write it. The
 * text part keeps the code the only 6-digit number after the first blank line, where the mail
 * log reader looks for it.
 */
export function withTemplates (document: TenantsFile): TenantsFile {
  const html = `<!DOCTYPE html>
<html lang="{{ locale }}">
<head><meta charset="utf-8"><title>Your {{ brand }} code</title></head>
<body style="margin:0;padding:0;background:#f4f4f7;">
<table role="presentation" width="100%" cellpadding="0" cellspacing="0"><tr><td align="center" style="padding:24px;">
<table role="presentation" width="480" style="background:#ffffff;border-radius:8px;font-family:Helvetica,Arial,sans-serif;">
<tr><td style="padding:24px;"><img src="{{ constants.logoUrl }}" alt="{{ brand }}" width="120"></td></tr>
<tr><td style="padding:0 24px;font-size:16px;color:#1a1f36;">
<p>Hello,</p>
<p>Use this code to sign in to {{ brand }}:</p>
<p style="font-size:32px;font-weight:700;letter-spacing:6px;text-align:center;">{{ code }}</p>
<p>It expires in {{ minutes }} {% if minutes == 1 %}minute{% else %}minutes{% endif %}. Requested on {{ requestedAt | date: "%B %-d, %Y at %H:%M UTC" }}.</p>
<p>Didn't ask for it? <a href="{{ constants.supportUrl }}">Tell us</a>.</p>
</td></tr>
<tr><td style="padding:24px;font-size:12px;color:#6b7280;">{{ constants.legal }}</td></tr>
</table></td></tr></table>
</body>
</html>
`
  return {
    ...document,
    tenants: document.tenants.map((tenant) => ({
      ...tenant,
      brand: { name: 'Bench & Co' },
      constants: { logoUrl: 'https://cdn.bench.example/logo.png', supportUrl: 'https://bench.example/help', legal: 'Bench & Co Ltd, 1 Example Street, London' },
      templates: {
        en: {
          subject: 'Sign in to {{ brand }}',
          text: 'Hello,\n\nUse this code to sign in to {{ brand }}: {{ code }}\n\nIt expires in {{ minutes }} minutes.\n\n{{ constants.legal }}\n',
          html
        }
      }
    }))
  }
}

/** The bench tenant, its tenants file written in `dir`, and the environment of the services. */
export function benchTenant (dir: string): BenchTenant {
  const liveKey = generateKey('secret', 'live')
  const hmacSecret = randomBytes(32)
  const tenantsFile = join(dir, 'tenants.json')
  const document = benchTenantsDocument(liveKey)
  writeFileSync(tenantsFile, JSON.stringify(document))
  writeFileSync(join(dir, 'tenants-templates.json'), JSON.stringify(withTemplates(document)))
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
    // The refusal rows measure what answering a refusal costs, as fast as the load asks: the
    // pace would hold them instead (bench:noisy measures the pace against a flood).
    REFUSAL_PACE_PER_SECOND: '0',
    SHUTDOWN_GRACE_MS: '2000'
  }
  return { env, liveKey, hmacSecret, document, templatesFile: join(dir, 'tenants-templates.json') }
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

/** Which guesses a verify run sends: alternately right and wrong, or all right (receipts issued), or all wrong. */
export type Guesses = 'mixed' | 'right' | 'wrong'

/** A target's verify body for one guess; email-otp's and the Express peer's by default. */
export type VerifyBody = (token: Token, guess: string) => string

export const otpVerifyBody: VerifyBody = (token, guess) => JSON.stringify({ requestId: token.requestId, userGuess: guess })

/** Each token once, in order; with 'mixed', even ones with the right code (200), odd ones with a wrong one (400). */
export function verifyRequests (tokens: readonly Token[], guesses: Guesses = 'mixed', body: VerifyBody = otpVerifyBody): () => NextRequest {
  let index = 0
  return () => {
    const token = tokens[index]
    if (token === undefined) throw new Error('verify pool exhausted')
    const right = guesses === 'mixed' ? index % 2 === 0 : guesses === 'right'
    index++
    const guess = right ? token.code : String((Number(token.code) + 1) % 1_000_000).padStart(6, '0')
    return { body: body(token, guess), expected: right ? 200 : 400 }
  }
}
