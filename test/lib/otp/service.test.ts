import t, { type Test } from 'tap'
import { admissionPolicy } from '../../../lib/admission/plan.js'
import { AdmissionGate } from '../../../lib/admission/gate.js'
import { DEDUPE_TTL_MS } from '../../../lib/feedback/ses-feedback.js'
import { createState, type State } from '../../../lib/state/index.js'
import { parseConfig } from '../../../lib/config/from-env.js'
import { isApiError, type ApiError } from '../../../lib/errors.js'
import { AddressHasher } from '../../../lib/receipts/address-hash.js'
import { ReceiptIssuer } from '../../../lib/receipts/receipt-issuer.js'
import { Receipts } from '../../../lib/receipts/receipts.js'
import { deriveReceiptSigningKeys, prepareSigningKeys } from '../../../lib/receipts/signing-keys.js'
import { Mailer } from '../../../lib/mail/delivery/mailer.js'
import { parseWindow } from '../../../lib/limits/window.js'
import { TenantTurns } from '../../../lib/fairness/turns.js'
import { OtpService, type Caller, type VerifyResult } from '../../../lib/otp/service.js'
import { CodeSigner } from '../../../lib/otp/signer.js'
import { RecipientTagger } from '../../../lib/recipients/tag.js'
import type { MacKey } from '../../../lib/keys/mac-key.js'
import { generateKey, hashKey } from '../../../lib/keys/api-keys.js'
import { registryFromJson } from '../../../lib/tenants-file/load.js'
import type { TenantsFile } from '../../../schemas/tenants.js'
import { MailCapture, TEST_HMAC_KEYS } from '../../helper.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../support/redis.js'

const quiet = { info () {}, warn () {}, error () {} }
const DAY = parseWindow('1d') ?? (() => { throw new Error('test setup: 1d should parse') })()

/** Keyed hashes computed for codes and recipients. */
interface KeyedHashes { count: number }

/** The real signer, counting the keyed hashes it computes. */
class CountingSigner extends CodeSigner {
  readonly #counted: KeyedHashes

  constructor (keys: MacKey[], counted: KeyedHashes) {
    super(keys)
    this.#counted = counted
  }

  override sign (...args: Parameters<CodeSigner['sign']>): string {
    this.#counted.count++
    return super.sign(...args)
  }

  override storedForms (...args: Parameters<CodeSigner['storedForms']>): string[] {
    this.#counted.count++
    return super.storedForms(...args)
  }
}

/** The real tagger, counting the keyed hashes it computes. */
class CountingTagger extends RecipientTagger {
  readonly #counted: KeyedHashes

  constructor (secret: Buffer, counted: KeyedHashes) {
    super(secret)
    this.#counted = counted
  }

  override tag (value: string): string {
    this.#counted.count++
    return super.tag(value)
  }
}

interface Harness {
  keyedHashes: KeyedHashes
  receipts: Receipts
  service: OtpService
  state: State
  mail: MailCapture
  live: Caller
  sandbox: Caller
  /** The caller of another key of the tenant's (one `mutate` added). */
  callerOf: (key: string) => Caller
  events: string[]
}

/**
 * The service over the stores (memory or Redis), the real mailer (log transport for live mail, sandbox inbox for
 * test keys) and real receipts, no server; webhook events are collected.
 */
async function harness (t: Test, state: State, mutate: (file: TenantsFile) => void = () => {}, env: Record<string, string> = {}): Promise<Harness> {
  const liveKey = generateKey('secret', 'live')
  const testKey = generateKey('secret', 'test')
  const file: TenantsFile = {
    tiers: { small: { allowance: 3, window: '1d', sandboxAllowance: 10 } },
    tenants: [{
      id: 'acme',
      tier: 'small',
      brand: { name: 'Acme' },
      keys: [
        { id: 'live', kind: 'secret', mode: 'live', sha256: hashKey(liveKey) },
        { id: 'test', kind: 'secret', mode: 'test', sha256: hashKey(testKey) }
      ]
    }]
  }
  mutate(file)
  const registry = registryFromJson(file)
  const caller = (key: string): Caller => {
    const found = registry.authenticate(key, Date.now())
    if (found === null) throw new Error('test setup: the key does not authenticate')
    return { key: found, address: '192.0.2.1', log: quiet }
  }
  const config = parseConfig({ OTP_HMAC_KEYS: TEST_HMAC_KEYS, MAIL_TIMEOUT_MS: '200', RATE_LIMIT_RECIPIENT: '4/1m', LOCKOUT_THRESHOLD: '3', ...env })
  const keyedHashes: KeyedHashes = { count: 0 }
  const mail = new MailCapture()
  const mailer = new Mailer(config, { sandboxInbox: state.sandboxInbox, logOutput: mail })
  const events: string[] = []
  const issuer = new ReceiptIssuer({ keys: await prepareSigningKeys(await deriveReceiptSigningKeys(config.hmacKeys)), issuer: 'https://otp.test', ttlSeconds: 300 })
  const receipts = new Receipts(issuer, new AddressHasher(config.recipientTagKey.secret), state.redemptions)
  const service = new OtpService({
    policy: admissionPolicy(config),
    signer: new CountingSigner(config.hmacKeys, keyedHashes),
    tagger: new CountingTagger(config.recipientTagKey.secret, keyedHashes),
    gate: AdmissionGate.over(state),
    stores: state,
    verifications: state.verificationLog,
    // The guard's own tests are test/lib/reputation/ and test/routes/reputation.test.ts.
    reputation: { isPaused: () => false, sent () {}, async reported () {} },
    mailer,
    defaults: { ttlSeconds: config.otpTtlSeconds, mailFrom: config.mailFrom },
    suppressionMs: config.suppressionMs,
    ipv6BucketPrefix: config.ipv6BucketPrefix,
    observer: {
      dispatched: (_key, result) => { events.push('sentBy' in result ? 'sent' : `delivery_failed:${result.deliveryFailed}`) },
      checked: (_key, result: VerifyResult) => { events.push(result) },
      locked: (_key, _requestId, lockMs) => { events.push(`locked:${lockMs}`) },
      reviewed: () => { events.push('reviewed') }
    },
    receipts,
    events: { emit: (_tenant, _mode, type) => { events.push(`event:${type}`) } },
    turns: new TenantTurns(1)
  })
  t.teardown(async () => { await mailer.close() })
  return { keyedHashes, service, state, mail, live: caller(liveKey), sandbox: caller(testKey), callerOf: caller, events, receipts }
}

async function refusal (promise: Promise<unknown>): Promise<ApiError> {
  try {
    await promise
  } catch (error) {
    if (isApiError(error)) return error
    throw error
  }
  throw new Error('expected a refusal')
}

function wrong (code: string): string {
  return String((Number(code) + 1) % 1_000_000).padStart(6, '0')
}

function serviceSuite (t: Test, makeState: (t: Test) => Promise<State>): void {
  t.test('dispatch mails a code that verifies once; the answer carries the limits and the quota', async (t) => {
    const { service, mail, live, events, receipts } = await harness(t, await makeState(t))
    const sent = await service.dispatch(live, { email: 'Ada@Example.com', locale: 'fr' })
    t.match(sent, { requestId: /^otp_/, headers: { 'ratelimit-limit': '4', 'ratelimit-remaining': '3', 'quota-limit': '3', 'quota-remaining': '2' } })
    t.match(mail.text, /To: Ada@example\.com\n/, 'mail goes to the address as given, domain lower-cased')
    t.match(mail.text, /Votre code de vérification Acme/, 'in the asked locale')
    const code = mail.codeFor('Ada@example.com')
    const verified = await service.verify(live, sent.requestId, ` ${code} `)
    t.match(verified, { headers: { 'ratelimit-limit': '30' } }, 'the guess is trimmed')
    t.match(await receipts.redeem(live.key, verified.receipt, 'Ada@example.com'), { ok: true, claims: { tenant: 'acme', mode: 'live', requestId: sent.requestId } }, 'with a receipt for the address it was sent to')
    t.match(await refusal(service.verify(live, sent.requestId, code)), { code: 'CODE_MISMATCH' }, 'single use')
    t.strictSame(events, ['sent', 'verified', 'event:verification.succeeded', 'mismatch'], 'a used code sends no event: nothing tells it from an unknown one')
  })

  t.test('wrong and malformed guesses consume the code, with distinct codes', async (t) => {
    const { service, mail, live } = await harness(t, await makeState(t))
    const first = await service.dispatch(live, { email: 'bob@example.com' })
    const code = mail.codeFor('bob@example.com')
    t.match(await refusal(service.verify(live, first.requestId, wrong(code))), { code: 'CODE_MISMATCH', statusCode: 400 })
    t.match(await refusal(service.verify(live, first.requestId, code)), { code: 'CODE_MISMATCH' }, 'the right code after a wrong one fails')
    const second = await service.dispatch(live, { email: 'bob@example.com' })
    t.match(await refusal(service.verify(live, second.requestId, '12a456')), { code: 'INVALID_CODE_FORMAT' })
    t.match(await refusal(service.verify(live, second.requestId, mail.codeFor('bob@example.com'))), { code: 'CODE_MISMATCH' }, 'the malformed guess used it up')
  })

  t.test('recipient policy: a bad address is 400, a disposable or denied domain 403', async (t) => {
    const { service, live, state } = await harness(t, await makeState(t), (file) => { file.tenants[0]!.recipients = { denyDomains: ['rival.example'] } })
    t.match(await refusal(service.dispatch(live, { email: 'not an address' })), { code: 'INVALID_EMAIL', statusCode: 400 })
    t.match(await refusal(service.dispatch(live, { email: 'a@mailinator.com' })), { code: 'RECIPIENT_BLOCKED', statusCode: 403 })
    t.match(await refusal(service.dispatch(live, { email: 'a@sub.rival.example' })), { code: 'RECIPIENT_BLOCKED' })
    t.equal((await state.quota.usage('acme:live', DAY, Date.now())).used, 0, 'no unit charged')
  })

  t.test('the recipient limit answers 429 with Retry-After; the allowance 402 with Quota-*', async (t) => {
    const { service, live } = await harness(t, await makeState(t))
    for (let i = 0; i < 3; i++) await service.dispatch(live, { email: `user${i}@example.com` })
    t.match(await refusal(service.dispatch(live, { email: 'user9@example.com' })), {
      code: 'QUOTA_EXCEEDED', statusCode: 402, headers: { 'quota-limit': '3', 'quota-remaining': '0' }, message: /live allowance of tier "small" \(3 per 1d\)/
    })
    const { service: other, sandbox } = await harness(t, await makeState(t))
    for (let i = 0; i < 4; i++) await other.dispatch(sandbox, { email: 'carol@example.com' })
    t.match(await refusal(other.dispatch(sandbox, { email: 'carol@example.com' })), {
      code: 'RATE_LIMITED', statusCode: 429, headers: { 'retry-after': /^\d+$/, 'ratelimit-remaining': '0' }, message: /recipient/
    })
  })

  t.test('a failed delivery destroys the code and refunds the unit; the headers say so', async (t) => {
    const { service, sandbox, state, events } = await harness(t, await makeState(t))
    await service.dispatch(sandbox, { email: 'first@example.com' })
    const failed = await refusal(service.dispatch(sandbox, { email: 'fail@simulator.invalid' }))
    t.match(failed, { code: 'DELIVERY_FAILED', statusCode: 502, headers: { 'quota-limit': '10', 'quota-remaining': '9' } }, 'the state after the refund')
    t.equal((await state.quota.usage('acme:test', DAY, Date.now())).used, 1, 'only the delivered dispatch is charged')
    t.strictSame(events, ['sent', 'delivery_failed:rejected', 'event:delivery.failed'])
    t.same(await state.sandboxInbox.list('acme', 'fail@simulator.invalid'), [], 'nothing in the inbox')
  })

  t.test('a failed delivery gives back its unit of the tenant\'s mailbox count: mail that never left does not use up the reserve inside the cap', async (t) => {
    // A cap of one: from the second code on, only the tenant's reserve of two admits it.
    const { service, sandbox } = await harness(t, await makeState(t), () => {}, { RATE_LIMIT_MAILBOX: '1/1m' })
    const codes = []
    for (let i = 0; i < 4; i++) codes.push((await refusal(service.dispatch(sandbox, { email: 'fail@simulator.invalid' }))).code)
    t.strictSame(codes, ['DELIVERY_FAILED', 'DELIVERY_FAILED', 'DELIVERY_FAILED', 'DELIVERY_FAILED'], 'each try fails at the provider, none at the cap')
  })

  t.test('a page\'s dispatch to a suppressed mailbox: the failed delivery\'s 502 and clean-up, and no delivery.failed for the tenant', async (t) => {
    const pageKey = generateKey('restricted', 'live')
    const { service, live, callerOf, state, mail, events } = await harness(t, await makeState(t), (file) => {
      file.tenants[0]?.keys.push({ id: 'page', kind: 'restricted', mode: 'live', sha256: hashKey(pageKey), origins: ['app.acme.test'], allowance: '100%' })
    })
    await service.suppress(live, 'ada@example.com')
    const withheld = await refusal(service.dispatch(callerOf(pageKey), { email: 'Ada@example.com' }))
    t.match(withheld, { code: 'DELIVERY_FAILED', statusCode: 502, headers: { 'ratelimit-limit': '30', 'ratelimit-remaining': '29' } }, 'its own source\'s headers, as after a failed send')
    t.equal(mail.count, 0, 'nothing sent')
    t.equal((await state.quota.usage('acme:live', DAY, Date.now())).used, 0, 'the unit given back')
    t.strictSame(events, [], 'the tenant hears of no failed delivery: its mailbox is suppressed, which it knows')
    t.match(await refusal(service.dispatch(live, { email: 'ada@example.com' })), { code: 'RECIPIENT_SUPPRESSED', statusCode: 422 }, 'its backend hears the suppression')
  })

  t.test('wrong guesses lock the recipient out of new codes', async (t) => {
    const { service, mail, sandbox } = await harness(t, await makeState(t))
    for (let i = 0; i < 3; i++) {
      const { requestId } = await service.dispatch(sandbox, { email: 'dan@example.com' })
      await refusal(service.verify(sandbox, requestId, wrong(mail.codeFor('dan@example.com'))))
    }
    t.match(await refusal(service.dispatch(sandbox, { email: 'DAN+x@example.com' })), { code: 'RATE_LIMITED', message: /wrong codes/, headers: { 'retry-after': /^\d+$/ } }, 'counted per mailbox, across spellings')
  })
}

t.test('embedded state', async (t) => {
  serviceSuite(t, async (t) => {
    const state = createState(null, { memoryStoreMaxTokens: 1000, feedbackDedupeTtlMs: DEDUPE_TTL_MS })
    t.teardown(async () => { await state.close() })
    return state
  })
})

t.test('Redis state', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  serviceSuite(t, async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    return createState(client, { memoryStoreMaxTokens: 1, feedbackDedupeTtlMs: DEDUPE_TTL_MS })
  })

  t.test('a caller Redis found past its own limit is refused again before any keyed hash is computed for it', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    await client.flushall()
    const { service, keyedHashes, sandbox, events } = await harness(t, createState(client, { memoryStoreMaxTokens: 1000, feedbackDedupeTtlMs: DEDUPE_TTL_MS }), () => {}, { RATE_LIMIT_SOURCE: '2/1m' })
    const sent = await service.dispatch(sandbox, { email: 'ada@example.com' })
    await service.dispatch(sandbox, { email: 'bob@example.com' })
    t.match(await refusal(service.dispatch(sandbox, { email: 'cy@example.com' })), { code: 'RATE_LIMITED', statusCode: 429 }, 'the store\'s 429')
    const hashed = keyedHashes.count
    t.ok(hashed > 0, 'the admitted dispatches and the store\'s refusal were hashed')
    const again = await refusal(service.dispatch(sandbox, { email: 'dee@example.com' }))
    t.match(again, { code: 'RATE_LIMITED', statusCode: 429, headers: { 'ratelimit-limit': '2', 'ratelimit-remaining': '0', 'retry-after': /^\d+$/ } }, 'the same 429, from memory')
    t.match(await refusal(service.verify(sandbox, sent.requestId, '123456')), { code: 'RATE_LIMITED' }, 'a verify from the source too')
    // Its address is not read: a bad one is refused as over the limit, as the refusal count would.
    t.match(await refusal(service.dispatch(sandbox, { email: 'not an address' })), { code: 'RATE_LIMITED', statusCode: 429 }, 'a bad address from the source too')
    t.equal(keyedHashes.count, hashed, 'neither computed a keyed hash')
    t.notOk(events.includes('mismatch'), 'the refused verify checked no guess')
    const other: Caller = { ...sandbox, address: '192.0.2.2' }
    await service.dispatch(other, { email: 'eve@example.com' })
    t.ok(keyedHashes.count > hashed, 'another source is served as before')
  })
})
