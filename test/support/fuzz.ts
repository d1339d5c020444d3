/*
 * What the property-based fuzz tests of the HTTP surface share (test/app/fuzz-*.test.ts): the
 * app under test, the generators of hostile requests, the contract every answer must honour.
 * In process (app.inject, no network).
 *
 * Whatever arrives (any route, method, header, query string or body) the service must answer,
 * never with a 5xx it did not mean (the only expected one is 502 for the documented sandbox
 * simulator recipients), always with the contract's error body, and without touching
 * Object.prototype.
 *
 * The seed is fixed so that a run is reproducible; FUZZ_SEED and FUZZ_RUNS override it and
 * the number of runs of each property. Each property has a file of its own, so each has tap's
 * whole per-file timeout; its time budget is a stall guard far above what it takes on a busy
 * machine (with FUZZ_RUNS set the budget is lifted: raise tap's --timeout for long runs).
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Test } from 'tap'
import fc from 'fast-check'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { errorCatalog } from '../../schemas/error-catalog.js'
import { bearer, buildApp, writeTenants, type Capture, type FixtureKeys } from '../helper.js'

function envInteger (name: string): number | undefined {
  const text = process.env[name]
  if (text === undefined || text === '') return undefined
  const value = Number(text)
  if (!Number.isSafeInteger(value)) throw new Error(`${name} must be an integer (got ${JSON.stringify(text)})`)
  return value
}

export const SEED = envInteger('FUZZ_SEED') ?? 20250611
export const RUNS = envInteger('FUZZ_RUNS')
// A stall guard, shrinking included: a property takes 10–20 s on a busy 2-core machine, and
// stopping it here, inside tap's per-file timeout (180 s), still reports the counterexample.
const TIME_BUDGET_MS = 120_000
// Per run (a batch of concurrent requests), also a stall guard: the slowest legitimate answer
// is the slow simulator recipient at MAIL_TIMEOUT_MS (100 ms), or a preview, which renders in
// a thread at a lower priority that a loaded machine serves last (10 s were not enough at a
// load of 12 on two cores).
const RUN_DEADLINE_MS = 30_000

// Rate limits and lockouts would turn a long fuzz run into a wall of 429s.
const HIGH_LIMIT = '100000000/1m'
const APP_ENV: Record<string, string> = {
  // Only 5xx are logged at error: the last line explains a failure.
  LOG_LEVEL: 'error',
  // The slow simulator recipient waits for this long: keep it short.
  MAIL_TIMEOUT_MS: '100',
  RATE_LIMIT_RECIPIENT: HIGH_LIMIT,
  RATE_LIMIT_SOURCE: HIGH_LIMIT,
  RATE_LIMIT_KEY: HIGH_LIMIT,
  LOCKOUT_THRESHOLD: '100000000'
}

// Networks on the service's block list and on the tenants' own deny lists.
const LISTED_V4 = '198.51.100.0/24'
const LISTED_V6 = '2001:db8:bad::/48'
const TENANT_BLOCKED_V4 = '203.0.113.0/24'
const TENANT_BLOCKED_V6 = '2001:db8:dead::/48'

/** The reserved recipients of docs/delivery.md: the only inputs allowed to answer 502. */
const SIMULATED_RECIPIENTS = new Set(['fail@simulator.invalid', 'slow@simulator.invalid', 'throttled@simulator.invalid'])

/** Keys the hostile bodies and query strings try to plant on Object.prototype. */
const PROBE_KEYS = ['polluted', 'isAdmin', 'fuzzProbe'] as const

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'HEAD' | 'OPTIONS'

export interface FuzzRequest {
  method: Method
  url: string
  headers: Record<string, string>
  payload?: string | Buffer
}

export interface Harness {
  app: FastifyInstance
  logs: Capture
  keys: FixtureKeys
}

// ---------------------------------------------------------------------------------------
// Object.prototype, before anything hostile was parsed.

function prototypeSnapshot (): Map<string, unknown> {
  const snapshot = new Map<string, unknown>()
  for (const name of Object.getOwnPropertyNames(Object.prototype)) {
    const descriptor = Object.getOwnPropertyDescriptor(Object.prototype, name)
    snapshot.set(name, descriptor?.value ?? descriptor?.get)
  }
  return snapshot
}

const prototypeBefore = prototypeSnapshot()

function assertPrototypeIntact (): void {
  const now = prototypeSnapshot()
  const changed = [...new Set([...now.keys(), ...prototypeBefore.keys()])]
    .filter((name) => now.get(name) !== prototypeBefore.get(name) || now.has(name) !== prototypeBefore.has(name))
  if (changed.length > 0) throw new Error(`Object.prototype changed: ${changed.join(', ')}`)
  const probe: Record<string, unknown> = {}
  for (const key of PROBE_KEYS) {
    if (probe[key] !== undefined) throw new Error(`Object.prototype.${key} was planted`)
  }
}

// ---------------------------------------------------------------------------------------
// The app under test: one per property, with allowances and velocity limits so high that
// 402 and 429 never hide the routes behind them.

export async function harness (t: Test): Promise<Harness> {
  const tenants = writeTenants(t, (file) => {
    for (const tier of Object.values(file.tiers)) {
      tier.allowance = 1_000_000_000
      tier.sandboxAllowance = 1_000_000_000
    }
    for (const tenant of file.tenants) {
      tenant.limits = { recipient: HIGH_LIMIT, source: HIGH_LIMIT, key: HIGH_LIMIT }
      tenant.blockedNetworks = [TENANT_BLOCKED_V4, TENANT_BLOCKED_V6]
    }
    // Its own wording in a language the service has and in one it has not: hostile locales
    // and Accept-Language headers are negotiated among them.
    file.tenants[0]!.constants = { legal: '<b>Acme</b> & Co' }
    file.tenants[0]!.templates = {
      fr: { subject: 'Code {{ brand }}', html: '<p>{{ code }}</p><small>{{ constants.legal }}</small>' },
      'pt-BR': { subject: 'Seu código {{ brand }}', text: 'Código: {{ code }}', html: '<p>{{ code }}</p>' }
    }
  })
  const blocklist = join(t.testdirName, 'blocklist.txt')
  writeFileSync(blocklist, `# fuzz\n${LISTED_V4}\n${LISTED_V6}\n`)
  // Trusting the injector's own address hands X-Forwarded-For, hostile or not, to the
  // source-address parsing, the block lists and the per-source limits.
  const { app, logs } = await buildApp(t, { ...APP_ENV, TENANTS_FILE: tenants.path, TRUST_PROXY: '127.0.0.1', IP_BLOCKLISTS: blocklist })
  // The preview thread starts with the first preview and loads its modules there: started
  // here, so that no run of a property is charged for it.
  const warmed = await app.inject({ method: 'POST', url: '/templates/preview', headers: bearer(tenants.keys.acmeLive), payload: {} })
  if (warmed.statusCode !== 200) throw new Error(`the preview thread did not start: ${warmed.statusCode} ${warmed.body}`)
  return { app, logs, keys: tenants.keys }
}

export async function send (app: FastifyInstance, request: FuzzRequest): Promise<LightMyRequestResponse> {
  return await app.inject({
    method: request.method,
    url: request.url,
    headers: request.headers,
    ...(request.payload === undefined ? {} : { payload: request.payload })
  })
}

// ---------------------------------------------------------------------------------------
// The properties every answer must have.

/** Whether the body names a simulator recipient, read the way the service reads it. */
function targetsSimulator (request: FuzzRequest): boolean {
  let body: unknown
  try {
    body = JSON.parse(request.payload?.toString() ?? '')
  } catch {
    return false
  }
  const email = (body as { email?: unknown } | null)?.email
  return typeof email === 'string' && SIMULATED_RECIPIENTS.has(email.trim().normalize('NFC').toLowerCase())
}

function describe (request: FuzzRequest, answer: LightMyRequestResponse, logs: Capture): string {
  const lastLog = logs.lines.at(-1) ?? '(no error logged)'
  return `${request.method} ${request.url.slice(0, 200)} answered ${answer.statusCode} ${answer.body.slice(0, 300)}; last error log: ${lastLog.slice(0, 600)}`
}

/** Throws (failing the run) unless the answer honours the contract. */
export function checkAnswer (request: FuzzRequest, answer: LightMyRequestResponse, logs: Capture): void {
  const status = answer.statusCode
  let body: unknown
  try {
    body = answer.json()
  } catch {
    body = undefined
  }
  const { success, message, code } = (body ?? {}) as Record<string, unknown>
  if (status >= 500 && !(status === 502 && code === 'DELIVERY_FAILED' && targetsSimulator(request))) {
    throw new Error(`unexpected ${status}: ${describe(request, answer, logs)}`)
  }

  // HEAD answers carry an error's headers, not its body.
  if (status >= 400 && request.method !== 'HEAD') {
    if (!String(answer.headers['content-type']).startsWith('application/json')) {
      throw new Error(`error answer is not JSON: ${describe(request, answer, logs)}`)
    }
    const keys = Object.keys(body ?? {}).sort().join(',')
    if (keys !== 'code,message,success' || success !== false || typeof message !== 'string' || typeof code !== 'string') {
      throw new Error(`error body is not { success: false, message, code }: ${describe(request, answer, logs)}`)
    }
    // The table of docs/api.md ties each code to one status; clients branch on either.
    const catalogued = (errorCatalog as Record<string, { status: number } | undefined>)[code]
    if (catalogued?.status !== status) throw new Error(`code ${code} does not belong to status ${status}: ${describe(request, answer, logs)}`)
    if (status === 405 && answer.headers.allow === undefined) throw new Error(`405 without Allow: ${describe(request, answer, logs)}`)
    if (/\bat .+\.(ts|js):\d+/.test(message)) throw new Error(`a stack trace leaked: ${describe(request, answer, logs)}`)
  }
  assertPrototypeIntact()
}

export async function runProperty<Ts> (t: Test, name: string, defaultRuns: number, property: fc.IAsyncProperty<Ts>): Promise<void> {
  const numRuns = RUNS ?? defaultRuns
  const details = await fc.check(property, {
    seed: SEED,
    numRuns,
    plugins: [
      fc.timeout(RUN_DEADLINE_MS),
      ...(RUNS === undefined ? [fc.interruptAfterTimeLimit(TIME_BUDGET_MS, { failOnInterrupt: true })] : [])
    ]
  })
  if (details.failed) {
    // The report names the seed, the replay path and the shrunk counterexample; the error
    // says which property of the answer broke.
    const reason = details.errorInstance instanceof Error
      ? details.errorInstance.message
      : details.interrupted ? `not done within the ${TIME_BUDGET_MS} ms budget` : String(details.errorInstance)
    t.fail(`${name}: ${reason}\n${fc.defaultReportMessage(details) ?? ''}`)
  } else {
    t.pass(`${name}: ${details.numRuns} runs, seed ${SEED}`)
  }
}

// ---------------------------------------------------------------------------------------
// Generators.

const ROUTES = ['/otp/request', '/otp/verify', '/usage', '/verifications/otp_fuzzedRequest00000000', '/insights', '/sandbox/messages', '/templates/preview', '/healthz', '/readyz', '/openapi.json']

/**
 * Absent two times in three: each request keeps most of its envelope plausible. Shrinking
 * drops it first, so a counterexample keeps only what matters.
 */
const sometimes = <T>(arbitrary: fc.Arbitrary<T>): fc.Arbitrary<T | undefined> =>
  fc.oneof({ withCrossShrink: true }, { weight: 2, arbitrary: fc.constant(undefined) }, arbitrary)

/** Strings built to hurt: any code point, control bytes, injections, and the body limit. */
const hostileString: fc.Arbitrary<string> = fc.oneof(
  // fast-check 4's spelling of fullUnicodeString: any code point but lone surrogates.
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'binary-ascii', maxLength: 40 }),
  // eslint-disable-next-line no-template-curly-in-string -- a log4shell probe, sent as text
  fc.constantFrom('', ' ', '\r\n', '\0', 'a\r\nBcc: x@y.co', '\u2028', '\ufeff', '%00', '%', '${jndi:ldap://x}', '<script>', '../../etc/passwd',
    '__proto__', 'constructor', 'prototype', 'null', 'NaN', '-0', 'Infinity'),
  // Around BODY_LIMIT_BYTES (4096), on both sides of it.
  fc.integer({ min: 4000, max: 4200 }).map((n) => 'a'.repeat(n))
)

const email: fc.Arbitrary<string> = fc.oneof(
  fc.emailAddress(),
  fc.constantFrom(...SIMULATED_RECIPIENTS),
  fc.constantFrom(...SIMULATED_RECIPIENTS).map((address) => ` ${address.toUpperCase()}\t`),
  fc.tuple(hostileString, fc.constantFrom('@example.com', '@bücher.example', '@', '')).map(([local, domain]) => local + domain),
  fc.tuple(fc.emailAddress(), fc.constantFrom('\r\nBcc: victim@example.com', '\0', '\n', ' <x@y.co>', '(comment)', '.')).map(([address, tail]) => address + tail),
  fc.integer({ min: 60, max: 1100 }).map((n) => 'a'.repeat(n) + '@example.com'),
  hostileString
)

const locale: fc.Arbitrary<string> = fc.oneof(fc.constantFrom('fr', 'de-CH', 'es', 'en-US', 'pt', 'pt-br', 'xx', 'zz-Latn-ZZ-abcdefgh', 'fr\n', 'a'.repeat(300)), hostileString)

const guess: fc.Arbitrary<string> = fc.oneof(
  fc.stringMatching(/^[0-9]{6}$/),
  fc.constantFrom('１２３４５６', '١٢٣٤٥٦', ' 123456 ', '123456\0', '12345', '1234567', '-12345', '1e5', '0x1E240', '12 345'),
  hostileString
)

const requestId: fc.Arbitrary<string> = fc.oneof(
  fc.stringMatching(/^otp_[A-Za-z0-9_-]{22}$/),
  fc.constantFrom('__proto__', 'constructor', 'prototype', 'otp_' + 'a'.repeat(60), 'a'.repeat(65), 'otp_x.y', 'otp_*'),
  hostileString
)

/** JSON text (not values: 1e999 and duplicate keys exist only as text). */
const jsonValueText: fc.Arbitrary<string> = fc.oneof(
  fc.json({ maxDepth: 50 }),
  fc.constantFrom('1e999999', '-1e999999', '123456789012345678901234567890', '-0', '0.0000000000000000000000001', '9007199254740993', '1.7976931348623157e309'),
  fc.constantFrom('{"polluted":"yes"}', '{"prototype":{"isAdmin":true}}', '{"__proto__":{"fuzzProbe":1}}', '{"constructor":{"prototype":{"polluted":1}}}')
)

const stringText = (arbitrary: fc.Arbitrary<string>): fc.Arbitrary<string> => arbitrary.map((value) => JSON.stringify(value))

/** One `"key": value` member; keys repeat freely, so duplicates and `__proto__` stay in the text. */
const member: fc.Arbitrary<readonly [string, string]> = fc.oneof(
  fc.tuple(fc.constant('email'), fc.oneof({ weight: 3, arbitrary: stringText(email) }, jsonValueText)),
  fc.tuple(fc.constant('locale'), fc.oneof(stringText(locale), jsonValueText)),
  fc.tuple(fc.constant('requestId'), fc.oneof({ weight: 3, arbitrary: stringText(requestId) }, jsonValueText)),
  fc.tuple(fc.constant('userGuess'), fc.oneof({ weight: 3, arbitrary: stringText(guess) }, jsonValueText)),
  fc.tuple(fc.constantFrom('__proto__', 'constructor', 'prototype'), jsonValueText),
  fc.tuple(fc.string({ unit: 'binary', maxLength: 20 }), jsonValueText)
)

const objectText: fc.Arbitrary<string> = fc.array(member, { maxLength: 5 })
  .map((members) => `{${members.map(([key, value]) => `${JSON.stringify(key)}:${value}`).join(',')}}`)

const body: fc.Arbitrary<string | Buffer> = fc.oneof(
  { weight: 6, arbitrary: objectText },
  // Bodies of the right shape, so that hostile values get past the schema to the handlers.
  { weight: 3, arbitrary: fc.record({ email, locale: sometimes(locale) }).map((value) => JSON.stringify(value)) },
  { weight: 3, arbitrary: fc.record({ requestId, userGuess: guess }).map((value) => JSON.stringify(value)) },
  fc.record({ locale: sometimes(locale), code: sometimes(guess), minutes: sometimes(fc.oneof(fc.integer(), fc.double())) }).map((value) => JSON.stringify(value)),
  fc.json({ maxDepth: 50 }),
  fc.object({ maxDepth: 50 }).map((value) => JSON.stringify(value)),
  // Nesting far deeper than any schema looks, up to the body limit.
  fc.tuple(fc.integer({ min: 1, max: 2100 }), fc.constantFrom('[', '{"a":')).map(([depth, open]) =>
    open.repeat(depth) + (open === '[' ? ']' : '1}').repeat(depth)),
  // Truncated JSON.
  fc.tuple(objectText, fc.nat()).map(([text, cut]) => text.slice(0, cut % (text.length + 1))),
  fc.integer({ min: 4040, max: 4120 }).map((n) => `{"email":"${'a'.repeat(n)}@example.com"}`),
  // Random bytes, and invalid UTF-8 inside an otherwise valid JSON string.
  fc.uint8Array({ maxLength: 5000 }).map((bytes) => Buffer.from(bytes)),
  fc.uint8Array({ minLength: 1, maxLength: 40 }).map((bytes) => Buffer.concat([Buffer.from('{"email":"'), Buffer.from(bytes), Buffer.from('@example.com"}')]))
)

const contentType: fc.Arbitrary<string> = fc.oneof(
  { weight: 8, arbitrary: fc.constant('application/json') },
  fc.constantFrom('application/json; charset=utf-8', 'application/json; charset=latin1', 'APPLICATION/JSON', 'application/json;', 'application/json ; charset="utf-8"',
    'application/jsonp', 'application/merge-patch+json', 'multipart/form-data; boundary=----x', 'text/plain', 'application/x-www-form-urlencoded',
    'application/octet-stream', '', ' ', ';', '*/*'),
  hostileString
)

const forwardedFor: fc.Arbitrary<string> = fc.oneof(
  fc.ipV4(),
  fc.ipV6(),
  fc.ipV4Extended(),
  fc.constantFrom('198.51.100.7', '203.0.113.9', '2001:db8:bad::1', '2001:db8:dead:1::1', '::ffff:203.0.113.9', '::ffff:198.51.100.7', 'fe80::1%eth0',
    'fe80::1%', '::', '0.0.0.0', '010.0.0.1', '127.1', '0x7f.0.0.1', '[::1]', '[::1]:80', '1.2.3.4:80', '::203.0.113.9', '1.2.3.4 , 5.6.7.8'),
  fc.array(fc.oneof(fc.ipV4(), fc.ipV6(), hostileString), { minLength: 2, maxLength: 4 }).map((list) => list.join(', ')),
  hostileString
)

function headers (keys: FixtureKeys): fc.Arbitrary<Record<string, string>> {
  const usable = [keys.acmeLive, keys.acmeTest, keys.acmeBrowser, keys.globexTest]
  const authorization = fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom(...usable).map((key) => `Bearer ${key}`) },
    fc.constant(undefined),
    fc.constantFrom(keys.acmeExpired, keys.acmeRevoked).map((key) => `Bearer ${key}`),
    fc.tuple(fc.constantFrom('bearer ', 'BEARER   ', 'Bearer\t', 'Basic ', '', 'Token '), fc.constantFrom(...usable), fc.constantFrom('', ' ', '  x', '\r\n', '\0', ',x'))
      .map(([scheme, key, tail]) => scheme + key + tail),
    hostileString.map((value) => `Bearer ${value}`),
    hostileString,
    fc.integer({ min: 200, max: 20_000 }).map((n) => `Bearer sk_test_${'A'.repeat(n)}`)
  )
  const origin = fc.oneof(
    fc.constantFrom('https://app.acme.test', 'http://localhost:5173', 'https://x.acme.dev', 'https://acme.dev', 'null', 'http://evil.example',
      'file://', 'https://app.acme.test:443/path', 'HTTPS://APP.ACME.TEST', 'https://app.acme.test.evil.example'),
    hostileString
  )
  const acceptLanguage = fc.oneof(
    fc.constantFrom('fr', 'de-CH, en;q=0.5', '*', 'xx-YY;q=2', ';q=', ',,,', 'fr;q=NaN', 'es;q=-1'),
    fc.integer({ min: 1, max: 2000 }).map((n) => 'fr;q=0.1,'.repeat(n)),
    hostileString
  )
  // A small pool makes keys collide across runs: replays and 422 mismatches get exercised.
  const idempotencyKey = fc.oneof(fc.constantFrom('key-1', 'key-2', 'key-3'), fc.integer({ min: 250, max: 300 }).map((n) => 'k'.repeat(n)), hostileString)
  return fc.record({
    authorization,
    'content-type': fc.oneof({ weight: 4, arbitrary: contentType }, fc.constant(undefined)),
    origin: sometimes(origin),
    'accept-language': sometimes(acceptLanguage),
    'idempotency-key': sometimes(idempotencyKey),
    'x-forwarded-for': sometimes(forwardedFor),
    // Framing headers that contradict the body.
    'content-length': sometimes(fc.oneof(fc.nat({ max: 10_000 }).map(String), fc.constantFrom('-1', '1e3', '18, 18', '99999999999999999999'), hostileString)),
    'content-encoding': sometimes(fc.oneof(fc.constantFrom('gzip', 'deflate', 'br', 'identity'), hostileString)),
    'x-filler': sometimes(fc.integer({ min: 1000, max: 20_000 }).map((n) => 'x'.repeat(n)))
  }).map((all) => Object.fromEntries(Object.entries(all).filter((entry): entry is [string, string] => entry[1] !== undefined)))
}

const path: fc.Arbitrary<string> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...ROUTES) },
  fc.constantFrom('/', '/otp', '/otp/request/', '/OTP/REQUEST', '/otp//verify', '/otp/request/../verify', '/otp/%72equest', '/docs', '/docs/json',
    '/docs/static/nope', '/metrics', '/.env', '/%00', '/%E0%A4%A', '/sandbox/messages/x', '/healthz/', '/__proto__', '/constructor/prototype'),
  // A request line always has a path (light-my-request cannot even send an empty one).
  fc.webPath().map((value) => value === '' ? '/' : value),
  hostileString.map((value) => `/${value}`)
)

const query: fc.Arbitrary<string | null> = fc.option(fc.oneof(
  email.map((address) => `email=${encodeURIComponent(address)}`),
  email.map((address) => `email=${address}`),
  fc.webQueryParameters(),
  fc.constantFrom('email=a@b.co&email=c@d.co', 'email[]=a@b.co', '__proto__[polluted]=1', 'constructor[prototype][fuzzProbe]=1', '__proto__=x',
    'email', '&&&', '=', '%', 'email=%E0%A4%A', 'email=%00'),
  // GET /insights: dates at and past every bound, repeated and empty.
  fc.tuple(fc.constantFrom('from', 'to'), fc.oneof(
    fc.date({ min: new Date(-8.64e15), max: new Date(8.64e15), noInvalidDate: true }).map((date) => encodeURIComponent(date.toISOString())),
    fc.constantFrom('', '0000-00-00T00:00:00Z', '%2B275760-09-13T00:00:00Z', '9999-12-31T23:59:60Z', '2026-02-29T00:00:00Z', '1e308', '-1', '99999999999999999999'),
    hostileString.map(encodeURIComponent)
  ), fc.constantFrom('', '&granularity=hour', '&granularity=day', '&granularity=week', '&from=2026-01-01T00:00:00Z')).map(([name, value, more]) => `${name}=${value}${more}`),
  hostileString
))

const method: fc.Arbitrary<Method> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom<Method>('GET', 'POST') },
  fc.constantFrom<Method>('PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS')
)

/**
 * light-my-request resolves the URL against http://localhost (`//x` excepted); a path that
 * starts with a backslash resolves to another host or to nothing, and cannot be sent in process.
 */
function sendableInProcess (url: string): boolean {
  try {
    return new URL(url.startsWith('//') ? `http://localhost${url}` : url, 'http://localhost').host === 'localhost'
  } catch {
    return false
  }
}

export function anyRequest (keys: FixtureKeys): fc.Arbitrary<FuzzRequest> {
  const url = fc.tuple(path, query).map(([path, query]) => query === null ? path : `${path}?${query}`).filter(sendableInProcess)
  return fc.record({ method, url, headers: headers(keys), payload: sometimes(body) })
    .map(({ method, url, headers, payload }) => ({ method, url, headers, ...(payload === undefined ? {} : { payload }) }))
}

/** Well-authenticated JSON posts to the OTP routes and the preview: only the body and a few headers vary. */
export function otpRequest (keys: FixtureKeys): fc.Arbitrary<FuzzRequest> {
  const caller = fc.constantFrom<Record<string, string>>(
    { authorization: `Bearer ${keys.acmeTest}` },
    { authorization: `Bearer ${keys.acmeLive}` },
    { authorization: `Bearer ${keys.globexTest}` },
    { authorization: `Bearer ${keys.acmeBrowser}`, origin: 'https://app.acme.test' }
  )
  const extra = headers(keys).map(({ 'accept-language': language, 'idempotency-key': idempotency }) => ({
    ...(language === undefined ? {} : { 'accept-language': language }),
    ...(idempotency === undefined ? {} : { 'idempotency-key': idempotency })
  }))
  return fc.record({ route: fc.constantFrom('/otp/request', '/otp/verify', '/templates/preview'), caller, extra, contentType, payload: body })
    .map(({ route, caller, extra, contentType, payload }) => ({
      method: 'POST' as const,
      url: route,
      headers: { ...caller, ...extra, 'content-type': contentType },
      payload
    }))
}
