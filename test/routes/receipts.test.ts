import { createHmac, generateKeyPairSync, randomBytes } from 'node:crypto'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { SignJWT, createRemoteJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify } from 'jose'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants, type FixtureKeys, type TestApp } from '../helper.js'
import { redisTestOptions, startRedis, type RedisServer } from '../support/redis.js'

type App = TestApp['app']

const ADDRESS_KEY = randomBytes(32)

/** The hash docs/receipts.md tells a backend to compute. */
function documentedHash (email: string): string {
  return createHmac('sha256', ADDRESS_KEY).update(email.trim().toLowerCase()).digest().subarray(0, 16).toString('base64url')
}

function tenants (t: Test): { path: string, keys: FixtureKeys } {
  return writeTenants(t, (file) => {
    const acme = file.tenants.find((tenant) => tenant.id === 'acme')
    if (acme !== undefined) acme.addressHashKey = ADDRESS_KEY.toString('base64')
  })
}

/** Dispatch and the right guess: the receipt of a real verification. */
async function verifiedReceipt (app: App, mail: TestApp['mail'], key: string, email: string, headers: Record<string, string> = {}): Promise<string> {
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(key), ...headers }, payload: { email } })
  if (sent.statusCode !== 200) throw new Error(`dispatch: ${sent.body}`)
  const requestId = sent.json().data.requestId as string
  const verified = await app.inject({ method: 'POST', url: '/otp/verify', headers: { ...bearer(key), ...headers }, payload: { requestId, userGuess: mail.codeFor(email) } })
  if (verified.statusCode !== 200) throw new Error(`verify: ${verified.body}`)
  return verified.json().data.receipt as string
}

async function redeem (app: App, key: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<{ status: number, body: any }> {
  const answer = await app.inject({ method: 'POST', url: '/otp/receipts/redeem', headers: { ...bearer(key), ...headers }, payload: body })
  return { status: answer.statusCode, body: answer.json() }
}

function receiptSuite (t: Test, env: () => Record<string, string>): void {
  t.test('a verified receipt checks with jose against the published JWKS, and redeems once', async (t) => {
    const { path, keys } = tenants(t)
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path, RECEIPT_ISSUER: 'https://otp.acme.test' })
    const base = await app.listen({ host: '127.0.0.1', port: 0 })

    const receipt = await verifiedReceipt(app, mail, keys.acmeLive, 'Ada.Lovelace@example.com')
    const jwksAnswer = await fetch(`${base}/.well-known/jwks.json`)
    t.equal(jwksAnswer.status, 200, 'no API key needed')
    t.match(jwksAnswer.headers.get('cache-control'), /^public, max-age=\d+$/)
    const { payload, protectedHeader } = await jwtVerify(receipt, createRemoteJWKSet(new URL(`${base}/.well-known/jwks.json`)), {
      issuer: 'https://otp.acme.test', audience: 'acme', typ: 'otp-receipt+jwt', algorithms: ['EdDSA', 'ES256']
    })
    t.equal(protectedHeader.alg, 'EdDSA')
    t.match(payload, { tenant: 'acme', mode: 'live', requestId: /^otp_/, addressHash: documentedHash('ada.lovelace@example.com'), jti: String, epoch: /^[\w-]{22}$/ })
    t.equal((payload.exp ?? 0) - (payload.iat ?? 0), 300)
    t.notMatch(Buffer.from(receipt.split('.')[1] ?? '', 'base64url').toString(), /ada|lovelace|example/i, 'the receipt does not carry the address')

    const first = await redeem(app, keys.acmeLive, { receipt, email: 'Ada.Lovelace@example.com' })
    t.equal(first.status, 200)
    t.same(first.body, { success: true, message: 'Receipt redeemed', data: { claims: payload } })
    const replay = await redeem(app, keys.acmeLive, { receipt, email: 'Ada.Lovelace@example.com' })
    t.same([replay.status, replay.body.code], [409, 'RECEIPT_ALREADY_REDEEMED'], 'a replayed receipt is refused')
  })

  t.test('only the tenant\'s secret keys of the same mode redeem, and only for the right address', async (t) => {
    const { path, keys } = tenants(t)
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const receipt = await verifiedReceipt(app, mail, keys.acmeBrowser, 'grace@example.com', { origin: 'https://app.acme.test' })

    const browser = await redeem(app, keys.acmeBrowser, { receipt, email: 'grace@example.com' }, { origin: 'https://app.acme.test' })
    t.same([browser.status, browser.body.code], [403, 'KEY_NOT_PERMITTED'], 'a restricted key cannot redeem')
    const otherTenant = await redeem(app, keys.globexTest, { receipt, email: 'grace@example.com' })
    t.same([otherTenant.status, otherTenant.body.code], [400, 'RECEIPT_INVALID'])
    const otherMode = await redeem(app, keys.acmeTest, { receipt, email: 'grace@example.com' })
    t.same([otherMode.status, otherMode.body.code], [400, 'RECEIPT_INVALID'], 'a live receipt does not redeem with a sandbox key')
    const wrongAddress = await redeem(app, keys.acmeLive, { receipt, email: 'mallory@example.com' })
    t.same([wrongAddress.status, wrongAddress.body.code], [400, 'RECEIPT_ADDRESS_MISMATCH'])
    const badAddress = await redeem(app, keys.acmeLive, { receipt, email: 'not an address' })
    t.same([badAddress.status, badAddress.body.code], [400, 'INVALID_EMAIL'])
    const right = await redeem(app, keys.acmeLive, { receipt, email: ' Grace@EXAMPLE.com ' })
    t.equal(right.status, 200, 'refusals did not use the receipt up; the right address redeems')
    t.equal(right.body.data.claims.addressHash, documentedHash('grace@example.com'))

    for (const junk of ['a.b.c', `${receipt.slice(0, -4)}AAAA`]) {
      const answer = await redeem(app, keys.acmeLive, { receipt: junk, anyAddress: true })
      t.same([answer.status, answer.body.code], [400, 'RECEIPT_INVALID'], junk.slice(0, 10))
    }
    const malformed = await redeem(app, keys.acmeLive, { receipt: 'no dots', anyAddress: true })
    t.same([malformed.status, malformed.body.code], [400, 'INVALID_BODY'])
    const extra = await redeem(app, keys.acmeLive, { receipt, email: 'grace@example.com', admin: true })
    t.same([extra.status, extra.body.code], [400, 'INVALID_BODY'])
    t.equal((await app.inject({ method: 'POST', url: '/otp/receipts/redeem', payload: { receipt, email: 'grace@example.com' } })).statusCode, 401)
  })

  t.test('the address binds unless the backend opts out by name: no email and no anyAddress is refused, the receipt unused', async (t) => {
    const { path, keys } = tenants(t)
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const receipt = await verifiedReceipt(app, mail, keys.acmeLive, 'linus@example.com')
    const forgotten = await redeem(app, keys.acmeLive, { receipt })
    t.same([forgotten.status, forgotten.body.code], [400, 'RECEIPT_ADDRESS_REQUIRED'], 'a backend that forgets the address is told so')
    const both = await redeem(app, keys.acmeLive, { receipt, email: 'linus@example.com', anyAddress: true })
    t.same([both.status, both.body.code], [400, 'INVALID_BODY'], 'an address and the opt-out contradict each other')
    const notTrue = await redeem(app, keys.acmeLive, { receipt, anyAddress: false })
    t.same([notTrue.status, notTrue.body.code], [400, 'INVALID_BODY'], 'the opt-out is `true` or absent')
    const anyAddress = await redeem(app, keys.acmeLive, { receipt, anyAddress: true })
    t.equal(anyAddress.status, 200, 'the refusals left the receipt unused; the explicit opt-out redeems it')
    t.equal(anyAddress.body.data.claims.addressHash, documentedHash('linus@example.com'), 'the claims still carry the address hash to compare')
  })

  t.test('a receipt signed with the service\'s own key whose aud is not its tenant does not redeem', async (t) => {
    const { path, keys } = tenants(t)
    const signing = generateKeyPairSync('ed25519').privateKey
    const pkcs8 = signing.export({ format: 'der', type: 'pkcs8' }).toString('base64')
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path, RECEIPT_SIGNING_KEYS: `k1:${pkcs8}` })
    const receipt = await verifiedReceipt(app, mail, keys.acmeLive, 'ada@example.com')
    const claims = decodeJwt(receipt)
    t.same([claims.tenant, claims.aud], ['acme', 'acme'])
    // The same claims but aud, signed with the key the service signs with: only aud is wrong.
    const otherAudience = await new SignJWT({ ...claims, aud: 'globex' }).setProtectedHeader(decodeProtectedHeader(receipt) as { alg: string }).sign(signing)
    const refused = await redeem(app, keys.acmeLive, { receipt: otherAudience, anyAddress: true })
    t.same([refused.status, refused.body.code], [400, 'RECEIPT_INVALID'], 'refused')
    t.equal((await redeem(app, keys.acmeLive, { receipt, anyAddress: true })).status, 200, 'the receipt as issued redeems: the refusal did not use it up')
  })

  t.test('a wrong guess answers no receipt', async (t) => {
    const { path, keys } = tenants(t)
    const { app, mail } = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'eve@example.com' } })
    const code = mail.codeFor('eve@example.com')
    const answer = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: sent.json().data.requestId, userGuess: code === '000000' ? '111111' : '000000' } })
    t.equal(answer.statusCode, 400)
    t.same(Object.keys(answer.json()).sort(), ['code', 'message', 'success'])
  })
}

t.test('memory', async (t) => {
  receiptSuite(t, () => ({}))

  t.test('without keys configured, a per-process key signs, with a warning', async (t) => {
    const { app, logs } = await buildApp(t)
    t.match(logs.text, /RECEIPT_SIGNING_KEYS is not set: receipts are signed with a per-process key/)
    const jwks = (await app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json()
    t.equal(jwks.keys.length, 1)
    t.match(jwks.keys[0], { kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig', kid: /^[\w-]{43}$/ })
  })
})

t.test('redis', redisTestOptions(), async (t) => {
  const redis: RedisServer = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const client = new Redis(redis.url)
  t.teardown(() => { client.disconnect() })
  t.beforeEach(async () => { await client.flushall() })
  const env = (): Record<string, string> => ({ REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  receiptSuite(t, env)

  t.test('two instances publish the same keys; a receipt redeems once across them', async (t) => {
    const { path, keys } = tenants(t)
    const a = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const b = await buildApp(t, { ...env(), TENANTS_FILE: path })
    const jwks = async (app: App): Promise<unknown> => (await app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json()
    t.same(await jwks(a.app), await jwks(b.app), 'keys derived from the shared OTP_HMAC_KEYS')
    for (let round = 0; round < 5; round++) {
      const receipt = await verifiedReceipt(a.app, a.mail, keys.acmeLive, `race${round}@example.com`)
      const body = { receipt, email: `race${round}@example.com` }
      const answers = await Promise.all([redeem(a.app, keys.acmeLive, body), redeem(b.app, keys.acmeLive, body), redeem(b.app, keys.acmeLive, body)])
      t.same(answers.map((answer) => answer.status).sort(), [200, 409, 409], `round ${round}: one redemption wins`)
    }
  })

  t.test('rotation: old receipts verify while the old key is listed', async (t) => {
    const { path, keys } = tenants(t)
    const key = (): string => generateKeyPairSync('ed25519').privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64')
    const [oldKey, newKey] = [key(), key()]
    const before = await buildApp(t, { ...env(), TENANTS_FILE: path, RECEIPT_SIGNING_KEYS: `old:${oldKey}` })
    const during = await buildApp(t, { ...env(), TENANTS_FILE: path, RECEIPT_SIGNING_KEYS: `new:${newKey},old:${oldKey}` })
    const after = await buildApp(t, { ...env(), TENANTS_FILE: path, RECEIPT_SIGNING_KEYS: `new:${newKey}` })
    const oldReceipts = [await verifiedReceipt(before.app, before.mail, keys.acmeLive, 'r1@example.com'), await verifiedReceipt(before.app, before.mail, keys.acmeLive, 'r2@example.com')]
    t.equal(decodeProtectedHeader(oldReceipts[0] ?? '').kid, 'old')
    const listed = (await during.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json().keys.map((jwk: { kid: string }) => jwk.kid)
    t.same(listed, ['new', 'old'])
    t.equal(decodeProtectedHeader(await verifiedReceipt(during.app, during.mail, keys.acmeLive, 'r3@example.com')).kid, 'new', 'the first key signs')
    t.equal((await redeem(during.app, keys.acmeLive, { receipt: oldReceipts[0], email: 'r1@example.com' })).status, 200, 'an old receipt redeems while its key is listed')
    const retired = await redeem(after.app, keys.acmeLive, { receipt: oldReceipts[1], email: 'r2@example.com' })
    t.same([retired.status, retired.body.code], [400, 'RECEIPT_INVALID'], 'refused once the old key is removed')
    t.match(decodeJwt(oldReceipts[1] ?? ''), { tenant: 'acme' })
  })
})

t.test('the OpenAPI document describes the receipt, the JWKS and redeem', async (t) => {
  const { app } = await buildApp(t)
  const document = (await app.inject({ method: 'GET', url: '/openapi.json' })).json()
  t.match(document.paths['/otp/verify'].post.responses['200'].content['application/json'].schema, { $ref: '#/components/schemas/VerifyReply' })
  t.match(document.components.schemas.VerifyReply.properties.data.properties.receipt, { type: 'string', pattern: String })
  t.ok(document.paths['/.well-known/jwks.json'].get.responses['200'])
  t.same(document.paths['/.well-known/jwks.json'].get.security, [], 'no key for the JWKS')
  const redeemRoute = document.paths['/otp/receipts/redeem'].post
  t.same(Object.keys(redeemRoute.responses).sort(), ['200', '400', '401', '403', '408', '409', '413', '415', '417', '429', '431', '500', '503'])
  t.match(JSON.stringify(redeemRoute.responses['400']), /RECEIPT_INVALID.*RECEIPT_EXPIRED.*RECEIPT_ADDRESS_MISMATCH/)
  t.match(JSON.stringify(redeemRoute.responses['409']), /RECEIPT_ALREADY_REDEEMED.*RECEIPT_NOT_REDEEMABLE/)
})
