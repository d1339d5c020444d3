/*
 * A receipt gives one successful redemption in its lifetime, also across restarts: of the
 * service on the embedded default (redemptions are not persisted: receipts of the previous
 * process are refused) and of a Redis that loses its data. And a receipt whose lifetime or
 * issue time the service would never have signed is refused even with a good signature. Real
 * processes, real sockets, a real redis-server.
 */
import { generateKeyPairSync, createPrivateKey } from 'node:crypto'
import t, { type Test } from 'tap'
import { SignJWT, decodeJwt } from 'jose'
import { TEST_HMAC_KEYS, writeTenants, type FixtureKeys } from '../helper.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { post, startServer, type Running } from '../support/service-process.js'
import { until } from '../support/wait.js'

const signingKey = generateKeyPairSync('ed25519').privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64')
const ISSUER = 'https://otp.acme.test'
/** Fixed keys, as an operator sets them: receipt signatures survive a restart, redemptions must not reopen. */
const baseEnv = { RECEIPT_SIGNING_KEYS: `k1:${signingKey}`, RECEIPT_ISSUER: ISSUER, LOG_LEVEL: 'warn' }

/** A real verification through the sandbox: its receipt. */
async function receiptOf (service: Running, keys: FixtureKeys, email: string): Promise<string> {
  const sent = await post(service.base, '/otp/request', keys.acmeTest, { email })
  if (sent.status !== 200) throw new Error(`dispatch: ${JSON.stringify(sent.body)}`)
  const inbox = await fetch(`${service.base}/sandbox/messages?email=${encodeURIComponent(email)}`, { headers: { authorization: `Bearer ${keys.acmeTest}` } })
  const code = ((await inbox.json()) as { data: { messages: Array<{ code: string }> } }).data.messages[0]?.code ?? ''
  const verified = await post(service.base, '/otp/verify', keys.acmeTest, { requestId: sent.body.data.requestId, userGuess: code })
  if (verified.status !== 200) throw new Error(`verify: ${JSON.stringify(verified.body)}`)
  return verified.body.data.receipt as string
}

async function redeem (service: Running, keys: FixtureKeys, receipt: string): Promise<[number, string]> {
  const answer = await post(service.base, '/otp/receipts/redeem', keys.acmeTest, { receipt, anyAddress: true })
  return [answer.status, answer.status === 200 ? 'redeemed' : answer.body.code]
}

async function stop (service: Running): Promise<void> {
  const exited = new Promise((resolve) => service.child.once('exit', resolve))
  service.child.kill('SIGKILL')
  await exited
}

/** Redeemed before the restart, issued before it and never redeemed, issued after it. */
async function acrossRestart (t: Test, keys: FixtureKeys, first: Running, restart: () => Promise<Running>): Promise<void> {
  const redeemed = await receiptOf(first, keys, 'redeemed@example.com')
  const unredeemed = await receiptOf(first, keys, 'unredeemed@example.com')
  t.same(await redeem(first, keys, redeemed), [200, 'redeemed'])
  t.same(await redeem(first, keys, redeemed), [409, 'RECEIPT_ALREADY_REDEEMED'])

  const second = await restart()
  t.same(await redeem(second, keys, redeemed), [409, 'RECEIPT_NOT_REDEEMABLE'], 'redeemed before the restart: never again after it')
  t.same(await redeem(second, keys, unredeemed), [409, 'RECEIPT_NOT_REDEEMABLE'], 'issued before and never redeemed: refused as well, whether it was cannot be known')
  const fresh = await receiptOf(second, keys, 'fresh@example.com')
  t.same(await redeem(second, keys, fresh), [200, 'redeemed'], 'a receipt issued after the restart redeems')
  t.same(await redeem(second, keys, fresh), [409, 'RECEIPT_ALREADY_REDEEMED'], 'once')
}

t.test('embedded default: a receipt redeems once, across a restart of the process', async (t) => {
  const { path, keys } = writeTenants(t)
  const env = { ...baseEnv, TENANTS_FILE: path }
  const first = await startServer(t, env)
  await acrossRestart(t, keys, first, async () => {
    await stop(first)
    return await startServer(t, env)
  })
})

t.test('Redis: a receipt redeems once, across a restart of redis-server that loses its data', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { path, keys } = writeTenants(t)
  const service = await startServer(t, { ...baseEnv, TENANTS_FILE: path, REDIS_URL: redis.url, OTP_HMAC_KEYS: TEST_HMAC_KEYS })
  await acrossRestart(t, keys, service, async () => {
    await redis.stop()
    await redis.start()
    await until('the service ready again on the restarted Redis', async () => (await fetch(`${service.base}/readyz`)).status === 200, 60_000)
    return service
  })
})

t.test('a receipt the service would not have issued is refused even with its signing key: too long-lived, or issued in the future', async (t) => {
  const { path, keys } = writeTenants(t)
  const service = await startServer(t, { ...baseEnv, TENANTS_FILE: path, RECEIPT_TTL_SECONDS: '300' })
  // A real receipt gives the claims (epoch included) a forger with the leaked key would copy.
  const claims = decodeJwt(await receiptOf(service, keys, 'model@example.com'))
  const key = createPrivateKey({ key: Buffer.from(signingKey, 'base64'), format: 'der', type: 'pkcs8' })
  const now = Math.floor(Date.now() / 1000)
  let minted = 0
  const forge = async (iat: number, exp: number): Promise<string> => await new SignJWT({ ...claims, iat, exp, jti: `forged-${minted++}` })
    .setProtectedHeader({ alg: 'EdDSA', kid: 'k1', typ: 'otp-receipt+jwt' }).sign(key)
  t.same(await redeem(service, keys, await forge(now, now + 300 + 3600)), [400, 'RECEIPT_INVALID'], 'an hour longer than RECEIPT_TTL_SECONDS')
  t.same(await redeem(service, keys, await forge(now + 120, now + 420)), [400, 'RECEIPT_INVALID'], 'issued two minutes in the future')
  t.same(await redeem(service, keys, await forge(now, now + 300)), [200, 'redeemed'], 'the same forgery with the service\'s own lifetime redeems: the lifetime alone was refused')
})
