import t from 'tap'
import { createHmac, createSecretKey, generateKeyPairSync, hkdfSync, randomBytes } from 'node:crypto'
import { SignJWT, createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify } from 'jose'
import { AddressHasher, addressHash } from '../../../lib/receipts/address-hash.js'
import { RECEIPT_CLOCK_TOLERANCE_SECONDS, ReceiptIssuer } from '../../../lib/receipts/receipt-issuer.js'
import { deriveReceiptSigningKeys, parseReceiptSigningKeys, prepareSigningKeys, type ReceiptKeyMaterial } from '../../../lib/receipts/signing-keys.js'
import { registryFromJson } from '../../../lib/tenants-file/load.js'
import type { Tenant } from '../../../lib/tenants/tenant.js'

function pkcs8 (type: 'ed25519' | 'p256'): string {
  const { privateKey } = type === 'ed25519' ? generateKeyPairSync('ed25519') : generateKeyPairSync('ec', { namedCurve: 'P-256' })
  return privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64')
}

async function issuerWith (keys: ReceiptKeyMaterial[], issuer = 'https://otp.example.com'): Promise<ReceiptIssuer> {
  return new ReceiptIssuer({ keys: await prepareSigningKeys(keys), issuer, ttlSeconds: 300 })
}

const decodeJwtId = (token: string): string | undefined => decodeJwt(token).jti

const subject = { tenant: 'acme', mode: 'live' as const, requestId: 'otp_abcdefghijklmnopqrstuv', addressHash: 'A'.repeat(22), epoch: 'E'.repeat(22) }

t.test('a receipt is a JWT that jose verifies against the published keys', async (t) => {
  const [oldKey, newKey] = parseReceiptSigningKeys(`new:${pkcs8('ed25519')},old:${pkcs8('p256')}`).reverse()
  if (oldKey === undefined || newKey === undefined) throw new Error('two keys')
  const issuer = await issuerWith([newKey, oldKey])
  const receipt = await issuer.issue(subject)
  t.same(decodeProtectedHeader(receipt), { alg: 'EdDSA', kid: 'new', typ: 'otp-receipt+jwt' })
  t.same(issuer.jwks.keys.map((key) => [key.kid, key.alg, key.kty, key.crv, key.use]), [['new', 'EdDSA', 'OKP', 'Ed25519', 'sig'], ['old', 'ES256', 'EC', 'P-256', 'sig']])
  t.notOk(JSON.stringify(issuer.jwks).includes('"d"'), 'no private part is published')

  const { payload } = await jwtVerify(receipt, createLocalJWKSet(issuer.jwks), { issuer: 'https://otp.example.com', audience: 'acme', typ: 'otp-receipt+jwt' })
  t.match(payload, { ...subject, iss: 'https://otp.example.com', aud: 'acme', jti: /^[\w-]{22}$/ })
  t.equal((payload.exp ?? 0) - (payload.iat ?? 0), 300, 'five minutes')
  const checked = await issuer.check(receipt)
  t.same(checked, { ok: true, claims: payload })
  t.not(decodeJwtId(await issuer.issue(subject)), payload.jti, 'every receipt has its own jti')
})

t.test('jose verifies the receipts of every supported algorithm against the published keys', async (t) => {
  const derived = await deriveReceiptSigningKeys([{ id: 'k1', secret: randomBytes(32) }])
  const cases: Array<[string, ReceiptKeyMaterial[]]> = [
    ['EdDSA', parseReceiptSigningKeys(`ed:${pkcs8('ed25519')}`)],
    ['ES256', parseReceiptSigningKeys(`ec:${pkcs8('p256')}`)],
    ['EdDSA', derived]
  ]
  for (const [alg, keys] of cases) {
    const issuer = await issuerWith(keys)
    const keySet = createLocalJWKSet(JSON.parse(JSON.stringify(issuer.jwks)))
    for (let i = 0; i < 20; i++) {
      const receipt = await issuer.issue(subject)
      const { payload, protectedHeader } = await jwtVerify(receipt, keySet, { issuer: 'https://otp.example.com', audience: 'acme', typ: 'otp-receipt+jwt', algorithms: [alg] })
      t.equal(protectedHeader.alg, alg)
      t.equal(protectedHeader.kid, keys[0]?.kid)
      t.match(payload, { ...subject, iss: 'https://otp.example.com', aud: 'acme', jti: /^[\w-]{22}$/ })
      const [header, body, signature] = receipt.split('.')
      const flipped = Buffer.from(signature ?? '', 'base64url')
      flipped[i % flipped.length] = (flipped[i % flipped.length] ?? 0) ^ 1
      await t.rejects(jwtVerify(`${header}.${body}.${flipped.toString('base64url')}`, keySet), `${alg}: a changed signature byte fails`)
    }
  }
})

t.test('anything but an unexpired receipt of a listed key is refused', async (t) => {
  const [key] = parseReceiptSigningKeys(`k1:${pkcs8('ed25519')}`)
  const [stranger] = parseReceiptSigningKeys(`k1:${pkcs8('ed25519')}`)
  if (key === undefined || stranger === undefined) throw new Error('keys')
  const issuer = await issuerWith([key])
  const receipt = await issuer.issue(subject)

  t.same(await issuer.check(await issuer.issue(subject, Date.now() - 600_000)), { ok: false, reason: 'expired' })
  t.same(await (await issuerWith([stranger])).check(receipt), { ok: false, reason: 'invalid' }, 'another key with the same kid')
  t.same(await issuer.check(await (await issuerWith([stranger])).issue(subject)), { ok: false, reason: 'invalid' }, 'signed elsewhere')
  t.same(await (await issuerWith([key], 'https://other.example.com')).check(receipt), { ok: false, reason: 'invalid' }, 'another issuer')
  const [header, payload, signature] = receipt.split('.')
  const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload ?? '', 'base64url').toString()), tenant: 'globex', aud: 'globex' })).toString('base64url')
  t.same(await issuer.check(`${header}.${forged}.${signature}`), { ok: false, reason: 'invalid' }, 'a changed claim')
  for (const junk of ['', 'a.b.c', 'not a jwt', receipt + 'x']) t.same(await issuer.check(junk), { ok: false, reason: 'invalid' }, JSON.stringify(junk.slice(0, 20)))

  const untyped = await new SignJWT({ ...subject }).setProtectedHeader({ alg: 'EdDSA', kid: 'k1' }).setIssuer('https://otp.example.com').setAudience('acme').setIssuedAt().setExpirationTime('5m').setJti('x').sign(key.privateKey)
  t.same(await issuer.check(untyped), { ok: false, reason: 'invalid' }, 'a JWT of another type from the same key')
  const misshapen = await new SignJWT({ ...subject, mode: 'admin' }).setProtectedHeader({ alg: 'EdDSA', kid: 'k1', typ: 'otp-receipt+jwt' }).setIssuer('https://otp.example.com').setAudience('acme').setIssuedAt().setExpirationTime('5m').setJti('x').sign(key.privateKey)
  t.same(await issuer.check(misshapen), { ok: false, reason: 'invalid' }, 'claims of the wrong shape')
})

t.test('a receipt signed with the service\'s own key whose aud is not its tenant is refused', async (t) => {
  const [key] = parseReceiptSigningKeys(`k1:${pkcs8('ed25519')}`)
  if (key === undefined) throw new Error('key')
  const issuer = await issuerWith([key])
  const receipt = await issuer.issue(subject)
  const header = decodeProtectedHeader(receipt)
  const claims = decodeJwt(receipt)
  const resign = async (aud: string): Promise<string> => await new SignJWT({ ...claims, aud }).setProtectedHeader({ alg: 'EdDSA', kid: header.kid ?? '', typ: header.typ ?? '' }).sign(key.privateKey)
  t.same(await issuer.check(await resign('acme')), { ok: true, claims }, 'signed again unchanged: the receipt as issued')
  t.same(await issuer.check(await resign('globex')), { ok: false, reason: 'invalid' }, 'only aud changed, to another tenant: refused')
})

t.test('a receipt that lives longer than RECEIPT_TTL_SECONDS, or is issued in the future, is refused even with a good signature', async (t) => {
  const [key] = parseReceiptSigningKeys(`k1:${pkcs8('ed25519')}`)
  if (key === undefined) throw new Error('key')
  const issuer = await issuerWith([key])
  const now = Math.floor(Date.now() / 1000)
  const signed = async (iat: number, exp: number): Promise<string> => await new SignJWT({ ...subject })
    .setProtectedHeader({ alg: 'EdDSA', kid: 'k1', typ: 'otp-receipt+jwt' }).setIssuer('https://otp.example.com').setAudience('acme')
    .setIssuedAt(iat).setExpirationTime(exp).setJti('minted').sign(key.privateKey)
  t.equal((await issuer.check(await signed(now, now + 300))).ok, true, 'the service\'s own lifetime: accepted (the forgery is otherwise a good receipt)')
  t.same(await issuer.check(await signed(now, now + 301)), { ok: false, reason: 'invalid' }, 'one second longer than RECEIPT_TTL_SECONDS')
  t.same(await issuer.check(await signed(now - 100, now + 86_400)), { ok: false, reason: 'invalid' }, 'a day long')
  t.same(await issuer.check(await signed(now + 60, now + 360)), { ok: false, reason: 'invalid' }, 'issued a minute in the future')
  t.equal((await issuer.check(await signed(now + 4, now + 304))).ok, true, `issued within the clock tolerance (${RECEIPT_CLOCK_TOLERANCE_SECONDS} s) ahead: accepted`)
  t.same(await issuer.check(await signed(now - 400, now + 5)), { ok: false, reason: 'expired' }, 'older than its lifetime: expired')
})

t.test('rotation: the new key signs, receipts of the old one verify while it is listed', async (t) => {
  const [oldKey, newKey] = parseReceiptSigningKeys(`old:${pkcs8('ed25519')},new:${pkcs8('ed25519')}`)
  if (oldKey === undefined || newKey === undefined) throw new Error('keys')
  const before = await issuerWith([oldKey])
  const during = await issuerWith([newKey, oldKey])
  const after = await issuerWith([newKey])
  const oldReceipt = await before.issue(subject)
  t.equal((await during.check(oldReceipt)).ok, true, 'the old receipt still verifies')
  t.equal(decodeProtectedHeader(await during.issue(subject)).kid, 'new', 'new receipts carry the new kid')
  t.same(await after.check(oldReceipt), { ok: false, reason: 'invalid' }, 'refused once the old key is removed')
})

t.test('RECEIPT_SIGNING_KEYS is checked entry by entry', async (t) => {
  t.throws(() => parseReceiptSigningKeys('nokid'), /kid:key pairs/)
  t.throws(() => parseReceiptSigningKeys('k1:bm90IGEga2V5'), /not the base64 of a PKCS#8 DER private key/)
  const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64')
  t.throws(() => parseReceiptSigningKeys(`k1:${rsa}`), /Ed25519 or P-256/)
  const key = pkcs8('ed25519')
  t.throws(() => parseReceiptSigningKeys(`k1:${key},k1:${key}`), /twice/)
})

t.test('derived keys: the same for every instance with the same HMAC keys, one per HMAC key', async (t) => {
  const secret = randomBytes(32)
  const [a] = await deriveReceiptSigningKeys([{ id: 'k1', secret }])
  const [b, c] = await deriveReceiptSigningKeys([{ id: 'k1', secret: Buffer.from(secret) }, { id: 'k0', secret: randomBytes(32) }])
  t.equal(a?.kid, b?.kid, 'same secret, same key')
  t.not(b?.kid, c?.kid)
  const issuer = await issuerWith([b, c].filter((key) => key !== undefined))
  t.equal((await (await issuerWith([a].filter((key) => key !== undefined))).check(await issuer.issue(subject))).ok, true, 'a receipt of one instance verifies on another')
})

function tenant (extra: Record<string, unknown> = {}, id = 'acme'): Tenant {
  const registry = registryFromJson({ tiers: { t: { allowance: 1, window: '1d', sandboxAllowance: 1 } }, tenants: [{ id, tier: 't', keys: [], ...extra }] })
  const found = registry.tenants.get(id)
  if (found === undefined) throw new Error(`tenant refused: ${registry.refused.get(id)?.problems.join('; ') ?? 'not in the file'}`)
  return found
}

t.test('address hash: what docs/receipts.md tells a backend to compute', async (t) => {
  const secret = randomBytes(32)
  const acme = tenant({ addressHashKey: secret.toString('base64') })
  const hasher = new AddressHasher(randomBytes(32))
  const documented = createHmac('sha256', secret).update('ada.lovelace@example.com').digest().subarray(0, 16).toString('base64url')
  t.equal(hasher.hash(acme, 'Ada.Lovelace@example.com'), documented)
  t.equal(addressHash(createSecretKey(secret), 'ADA.LOVELACE@EXAMPLE.COM'), documented, 'case does not matter')
  t.not(hasher.hash(acme, 'ada.lovelace+x@example.com'), documented, 'a +tag is another address')
  t.ok(hasher.matches(acme, 'ada.lovelace@example.com', documented))
  t.notOk(hasher.matches(acme, 'bob@example.com', documented))
  t.throws(() => tenant({ addressHashKey: randomBytes(24).toString('base64') }), /addressHashKey/, 'a key shorter than 32 bytes is refused')
})

t.test('address hash without a tenant key: per tenant, from RECIPIENT_TAG_KEY, as it was under the signing HMAC key', async (t) => {
  const tagKey = randomBytes(32)
  const hasher = new AddressHasher(tagKey)
  const acme = tenant()
  const hash = hasher.hash(acme, 'ada@example.com')
  t.not(hash, hasher.hash(tenant({}, 'globex'), 'ada@example.com'), 'tenants never share a hash')
  t.equal(new AddressHasher(tagKey).hash(acme, 'ada@example.com'), hash, 'every instance agrees')
  t.ok(hasher.matches(acme, 'ADA@example.com', hash), 'a hash checks against its address')
  t.notOk(hasher.matches(acme, 'bob@example.com', hash), 'and no other')
  t.notOk(new AddressHasher(randomBytes(32)).matches(acme, 'ada@example.com', hash), 'another key makes other hashes')
  // What earlier versions computed from the signing HMAC key: the migration sets the key to it.
  const derived = createSecretKey(Buffer.from(hkdfSync('sha256', tagKey, Buffer.alloc(0), 'email-otp address hash key\0acme', 32)))
  t.equal(hash, addressHash(derived, 'ada@example.com'), 'the derivation of earlier versions, so the key set to the old signing secret keeps every hash')
})
