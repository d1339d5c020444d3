/*
 * Key rotation during rolling updates: instances with the configuration before and after
 * each phase run side by side on one redis-server, as old and new pods do mid-rollout. A code
 * dispatched on either must verify on the other, and a receipt either signs must verify with
 * the JWKS either publishes (a client fetches it from whichever pod answers).
 */
import { generateKeyPairSync } from 'node:crypto'
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify, type JSONWebKeySet } from 'jose'
import t, { type Test } from 'tap'
import { bearer, buildApp, writeTenants, type TestApp } from '../helper.js'
import { redisTestOptions, startRedis } from '../support/redis.js'

const secret = (fill: number): string => Buffer.alloc(32, fill).toString('base64')
const OLD = `old:${secret(1)}`
const NEW = `new:${secret(2)}`
const receiptKey = (): string => generateKeyPairSync('ed25519').privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64')

interface Pod { name: string, built: TestApp }

async function crossCheck (t: Test, from: Pod, to: Pod, key: string, email: string): Promise<{ verified: boolean, kid: string | null, receiptChecks: boolean }> {
  const sent = await from.built.app.inject({ method: 'POST', url: '/otp/request', headers: bearer(key), payload: { email } })
  t.equal(sent.statusCode, 200, `${from.name} dispatches`)
  const code = from.built.mail.codeFor(email)
  const answer = await to.built.app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(key), payload: { requestId: sent.json().data.requestId, userGuess: code } })
  if (answer.statusCode !== 200) return { verified: false, kid: null, receiptChecks: false }
  const receipt = answer.json().data.receipt as string
  let receiptChecks = true
  for (const pod of [from, to]) {
    const jwks = (await pod.built.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json<JSONWebKeySet>()
    receiptChecks &&= await jwtVerify(receipt, createLocalJWKSet(jwks)).then(() => true, () => false)
  }
  return { verified: true, kid: decodeProtectedHeader(receipt).kid ?? null, receiptChecks }
}

async function rollout (t: Test, label: string, before: Pod, after: Pod, key: string, expectedKids: [string, string]): Promise<void> {
  const there = await crossCheck(t, before, after, key, `${label.replaceAll(' ', '-')}-1@example.com`)
  const back = await crossCheck(t, after, before, key, `${label.replaceAll(' ', '-')}-2@example.com`)
  t.same([there.verified, back.verified], [true, true], `${label}: codes verify across ${before.name} and ${after.name} both ways`)
  t.same([there.receiptChecks, back.receiptChecks], [true, true], `${label}: receipts verify with either instance's JWKS`)
  t.same([there.kid, back.kid], expectedKids, `${label}: the verifying instance signs each receipt with its own signing key`)
}

t.test('OTP HMAC keys (receipt keys derived): verify-only, then promoted, then the old one retired', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const pod = async (name: string, env: Record<string, string>): Promise<Pod> => ({ name, built: await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url, ...env }) })
  const before = await pod('before', { OTP_HMAC_KEYS: OLD })
  const phase1 = await pod('phase 1 (new key verify-only)', { OTP_HMAC_KEYS: `${OLD},${NEW}`, OTP_HMAC_SIGNING_KEY: 'old' })
  const phase2 = await pod('phase 2 (new key signs)', { OTP_HMAC_KEYS: `${OLD},${NEW}`, OTP_HMAC_SIGNING_KEY: 'new' })
  const after = await pod('after (old key removed)', { OTP_HMAC_KEYS: NEW })

  const jwks = async (p: Pod): Promise<string[]> => (await p.built.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json<JSONWebKeySet>().keys.map((jwk) => jwk.kid ?? '')
  const [oldKid, newKid] = await jwks(phase1)
  t.equal((await jwks(phase1)).length, 2, 'phase 1 publishes the new receipt key before any instance signs with it')
  t.same(await jwks(phase2), [newKid, oldKid], 'phase 2 publishes both, the signing one first')

  await rollout(t, 'rollout 1', before, phase1, keys.acmeLive, [oldKid ?? '', oldKid ?? ''])
  await rollout(t, 'rollout 2', phase1, phase2, keys.acmeLive, [newKid ?? '', oldKid ?? ''])
  await rollout(t, 'rollout 3', phase2, after, keys.acmeLive, [newKid ?? '', newKid ?? ''])

  // What the two phases avoid: the new key put first in one step.
  const naive = await pod('new key first in one step', { OTP_HMAC_KEYS: `${NEW},${OLD}` })
  const broken = await crossCheck(t, naive, before, keys.acmeLive, 'naive@example.com')
  t.equal(broken.verified, false, 'an old instance cannot verify a code signed with a key it has never seen')
  const receiptFromNaive = await crossCheck(t, before, naive, keys.acmeLive, 'naive-2@example.com')
  t.equal(receiptFromNaive.receiptChecks, false, 'and its JWKS lacks the key of receipts the new one signs')
})

t.test('receipt signing keys: published first, then promoted', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const [r1, r2] = [`r1:${receiptKey()}`, `r2:${receiptKey()}`]
  const pod = async (name: string, env: Record<string, string>): Promise<Pod> => ({ name, built: await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: OLD, ...env }) })
  const before = await pod('before', { RECEIPT_SIGNING_KEYS: r1 })
  const phase1 = await pod('phase 1 (r2 published)', { RECEIPT_SIGNING_KEYS: `${r1},${r2}`, RECEIPT_SIGNING_KEY: 'r1' })
  const phase2 = await pod('phase 2 (r2 signs)', { RECEIPT_SIGNING_KEYS: `${r1},${r2}`, RECEIPT_SIGNING_KEY: 'r2' })
  await rollout(t, 'rollout 1', before, phase1, keys.acmeLive, ['r1', 'r1'])
  await rollout(t, 'rollout 2', phase1, phase2, keys.acmeLive, ['r2', 'r1'])
})
