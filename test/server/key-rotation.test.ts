/*
 * Key rotation during rolling updates: instances with the configuration before and after
 * each phase run side by side on one redis-server, as old and new pods do mid-rollout. A code
 * dispatched on either must verify on the other, and a receipt either signs must verify with
 * the JWKS either publishes (a client fetches it from whichever pod answers). What a user or
 * a tenant sees of a mailbox (its suppression, its lockout, its recipient count, its address
 * hash) is the same on every one of them.
 */
import { generateKeyPairSync } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify, type JSONWebKeySet } from 'jose'
import t, { type Test } from 'tap'
import { bearer, buildApp, MailCapture, writeTenants, type TestApp } from '../helper.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { post, startServer, type Running } from '../support/service-process.js'

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

// 130 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('OTP HMAC keys (receipt keys derived): verify-only, then promoted, then the old one retired', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const pod = async (name: string, env: Record<string, string>): Promise<Pod> => ({ name, built: await buildApp(t, { TENANTS_FILE: path, REDIS_URL: redis.url, RECIPIENT_TAG_KEY: secret(1), ...env }) })
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

/** A pod of one rollout phase, as a real process. */
interface Process { name: string, server: Running }

/** The code the log transport printed last for `to` (the processes run with MAIL_TRANSPORT=log). */
function codeIn (pod: Process, to: string): string {
  const printed = new MailCapture()
  printed.text = pod.server.output()
  return printed.codeFor(to)
}

t.test('promoting a new HMAC key moves no mailbox: suppressions, lockouts, recipient counts and address hashes hold on every pod of the rotation', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  // The documented migration: RECIPIENT_TAG_KEY is the secret of the key that signs today.
  const tagKeyFile = join(t.testdirName, 'recipient-tag-key')
  writeFileSync(tagKeyFile, `${secret(1)}\n`)
  const common = { TENANTS_FILE: path, REDIS_URL: redis.url, LOG_LEVEL: 'warn', LOCKOUT_THRESHOLD: '2', RATE_LIMIT_RECIPIENT: '3/15m' }
  const phases: Array<{ name: string, env: Record<string, string> }> = [
    { name: 'before (one key, RECIPIENT_TAG_KEY unset)', env: { OTP_HMAC_KEYS: OLD } },
    { name: 'phase 1 (new key verify-only)', env: { OTP_HMAC_KEYS: `${OLD},${NEW}`, OTP_HMAC_SIGNING_KEY: 'old', RECIPIENT_TAG_KEY_FILE: tagKeyFile } },
    { name: 'phase 2 (new key signs)', env: { OTP_HMAC_KEYS: `${OLD},${NEW}`, OTP_HMAC_SIGNING_KEY: 'new', RECIPIENT_TAG_KEY_FILE: tagKeyFile } },
    { name: 'after (old key removed)', env: { OTP_HMAC_KEYS: NEW, RECIPIENT_TAG_KEY: secret(1) } }
  ]
  const pods: Process[] = await Promise.all(phases.map(async ({ name, env }) => ({ name, server: await startServer(t, { ...common, ...env }) })))
  const [before, phase1, phase2, after] = pods as [Process, Process, Process, Process]
  t.match(before.server.output(), /RECIPIENT_TAG_KEY is not set: recipient tags and address hashes are keyed by the secret of OTP_HMAC_KEYS key \\"old\\"/, 'the deployment as it is starts, and is told to set RECIPIENT_TAG_KEY before it rotates')

  const dispatch = async (pod: Process, email: string): Promise<{ status: number, body: any }> => await post(pod.server.base, '/otp/request', keys.acmeLive, { email })
  const verify = async (pod: Process, requestId: string, userGuess: string): Promise<{ status: number, body: any }> => await post(pod.server.base, '/otp/verify', keys.acmeLive, { requestId, userGuess })
  /** Two wrong guesses at codes `from` mailed to `email`, sent to `at`: the mailbox locks (LOCKOUT_THRESHOLD=2). */
  const lock = async (from: Process, at: Process, email: string): Promise<void> => {
    for (let i = 0; i < 2; i++) {
      const sent = await dispatch(from, email)
      t.equal(sent.status, 200, `${from.name} mails ${email}`)
      const wrong = codeIn(from, email) === '000000' ? '111111' : '000000'
      t.equal((await verify(at, sent.body.data.requestId, wrong)).status, 400, `a wrong guess on ${at.name}`)
    }
  }
  const addressHashOf = async (from: Process, at: Process, email: string): Promise<string> => {
    const sent = await dispatch(from, email)
    const verified = await verify(at, sent.body.data.requestId, codeIn(from, email))
    t.equal(verified.status, 200, `${from.name}'s code verifies on ${at.name}`)
    return String(decodeJwt(verified.body.data.receipt).addressHash)
  }
  /** What `pod` answers a dispatch to a suppressed, a locked and a counted-out mailbox. */
  const refusals = async (pod: Process, suppressed: string, locked: string, counted: string): Promise<unknown[]> => {
    const answers = await Promise.all([dispatch(pod, suppressed), dispatch(pod, locked), dispatch(pod, counted)])
    return answers.map((answer) => [answer.status, answer.body.code, answer.body.message])
  }
  const refused = [
    [422, 'RECIPIENT_SUPPRESSED', /bounced permanently or marked a message as spam/],
    [429, 'RATE_LIMITED', /Too many wrong codes were entered for this address/],
    [429, 'RATE_LIMITED', /Too many requests for this recipient/]
  ]

  // Under the key that signs before the rotation.
  t.equal((await post(before.server.base, '/recipients/suppress', keys.acmeLive, { email: 'bounced@example.com' })).status, 200)
  await lock(before, before, 'locked@example.com')
  for (let i = 0; i < 3; i++) t.equal((await dispatch(before, 'counted@example.com')).status, 200, 'counted towards the recipient limit')
  const hash = await addressHashOf(before, before, 'ada@example.com')

  for (const pod of pods) {
    t.match(await refusals(pod, 'Bounced@example.com', 'locked@example.com', 'counted@example.com'), refused, `${pod.name}: still suppressed, locked and counted`)
  }
  t.equal(await addressHashOf(phase2, phase1, 'ada@example.com'), hash, 'a receipt signed under the new key carries the address hash it had')
  t.equal(await addressHashOf(after, after, 'ada@example.com'), hash, 'and after the old key is gone')

  // Written by a pod that signs with the new key, seen by the old pods of the rollout.
  t.equal((await post(phase2.server.base, '/recipients/suppress', keys.acmeLive, { email: 'bounced-2@example.com' })).status, 200)
  await lock(phase2, phase1, 'locked-2@example.com')
  for (let i = 0; i < 3; i++) t.equal((await dispatch(phase2, 'counted-2@example.com')).status, 200, 'counted towards the recipient limit')
  for (const pod of [before, phase1]) {
    t.match(await refusals(pod, 'bounced-2@example.com', 'locked-2@example.com', 'counted-2@example.com'), refused, `${pod.name}: suppressed, locked and counted as on the new pods`)
  }
})
