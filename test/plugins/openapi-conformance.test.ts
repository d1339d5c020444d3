import t from 'tap'
import type { InjectOptions, LightMyRequestResponse } from 'fastify'
import { bearer, buildApp, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import { MemoryIdempotencyStore } from '../../lib/state/memory/idempotency-store.js'
import { freePort } from '../support/redis.js'
import { until } from '../support/wait.js'

/**
 * Real answers against the document: every answer of a documented operation has a
 * documented status, an error code listed under that status, and only documented headers;
 * every header documented on an answer was seen on it at least once.
 */

interface DocumentResponse {
  headers?: Record<string, { required?: boolean }>
  content?: Record<string, { schema: { allOf?: Array<{ properties?: { code?: { enum?: string[] } } }> } }>
}
interface Document {
  paths: Record<string, Record<string, { operationId: string, responses: Record<string, DocumentResponse> }>>
}

// HTTP's own headers, the CORS headers and the security headers every answer carries: they
// are not part of the API, and the document leaves them out.
const notTheApi = new Set([
  'content-type', 'content-length', 'date', 'connection', 'keep-alive', 'transfer-encoding', 'vary', 'cache-control',
  'access-control-allow-origin', 'access-control-allow-credentials', 'access-control-expose-headers',
  'content-security-policy', 'cross-origin-opener-policy', 'cross-origin-resource-policy', 'origin-agent-cluster',
  'referrer-policy', 'strict-transport-security', 'x-content-type-options', 'x-dns-prefetch-control',
  'x-download-options', 'x-frame-options', 'x-permitted-cross-domain-policies', 'x-xss-protection'
])

const operationIds = ['dispatchCode', 'verifyCode', 'getUsage', 'getVerification', 'getInsights', 'listSandboxMessages', 'unlockRecipient', 'suppressRecipient', 'unsuppressRecipient', 'redeemReceipt', 'previewTemplate', 'getReceiptKeys', 'getLiveness', 'getReadiness', 'receiveSesFeedback']
const connectionLayer = 'answered by the connection layer before any route is chosen; test/app/error-shapes.test.ts sends it over raw sockets'

// Documented answers no request here can provoke, and why.
const notExercised = new Map([
  ...['dispatchCode', 'verifyCode', 'getUsage', 'getVerification', 'getInsights', 'listSandboxMessages', 'unlockRecipient', 'suppressRecipient', 'unsuppressRecipient', 'redeemReceipt', 'previewTemplate'].map((id): [string, string] => [`${id} 500`, 'INTERNAL: no request makes the service fail']),
  ...operationIds.flatMap((id): Array<[string, string]> => [[`${id} 408`, connectionLayer], [`${id} 431`, connectionLayer]]),
  ['getLiveness 429', `the cap on connections per source: ${connectionLayer}`],
  ['getReadiness 429', `the cap on connections per source: ${connectionLayer}`],
  ['receiveSesFeedback 429', `the cap on connections per source: ${connectionLayer}`],
  ['receiveSesFeedback 500', 'INTERNAL: no request makes the service fail'],
  ['receiveSesFeedback 200', 'needs a message signed with a certificate SNS_SIGNING_CERT_URL_PATTERN accepts: test/routes/ses-feedback.test.ts serves one from loopback'],
  ['receiveSesFeedback 503', 'needs a certificate host that fails: test/routes/ses-feedback.test.ts runs one']
])

interface Exchange { operationId: string, what: string, answer: LightMyRequestResponse }

t.test('every answer the service sends is the one the document describes', async (t) => {
  const exchanges: Exchange[] = []
  // The key of a tenant the tenants file refuses (its subject breaks a rule).
  const refusedKey = generateKey('secret', 'live')
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants.push({ id: 'initech', tier: 'standard', keys: [{ id: 'initech_live', kind: 'secret', mode: 'live', sha256: hashKey(refusedKey) }], templates: { en: { subject: '{{ code }}' } } })
    file.tenants[0]!.blockedNetworks = ['192.0.2.0/24']
    // globex's sandbox allowance is one dispatch: the second answers 402.
    file.tenants[1]!.quota = { sandboxAllowance: 1 }
  })
  const main = await buildApp(t, { TENANTS_FILE: path })
  const json = { 'content-type': 'application/json' }
  async function exchange (app: typeof main.app, operationId: string, what: string, options: InjectOptions): Promise<LightMyRequestResponse> {
    const answer = await app.inject(options)
    exchanges.push({ operationId, what, answer })
    return answer
  }
  const dispatch = async (what: string, key: string | null, email: string, headers: Record<string, string> = {}, app = main.app) =>
    await exchange(app, 'dispatchCode', what, { method: 'POST', url: '/otp/request', headers: { ...(key === null ? {} : bearer(key)), ...headers }, payload: { email } })
  const verify = async (what: string, key: string | null, payload: unknown, headers: Record<string, string> = {}, app = main.app) =>
    await exchange(app, 'verifyCode', what, { method: 'POST', url: '/otp/verify', headers: { ...(key === null ? {} : bearer(key)), ...headers }, payload: payload as string })
  const get = async (operationId: string, what: string, url: string, key: string | null, headers: Record<string, string> = {}, app = main.app) =>
    await exchange(app, operationId, what, { method: 'GET', url, headers: { ...(key === null ? {} : bearer(key)), ...headers } })

  // Dispatch: every status, and the replay of the answers an Idempotency-Key keeps (those of
  // dispatches whose mail left; a refusal or a failed delivery runs again).
  await dispatch('sent', keys.acmeLive, 'ada@example.com')
  const withKey: Array<[string, string, string, boolean]> = [
    ['sent', keys.acmeLive, 'bob@example.com', true],
    ['refused address', keys.acmeLive, 'not an address', false],
    ['disposable domain', keys.acmeLive, 'x@mailinator.com', false],
    ['delivery failed', keys.acmeTest, 'fail@simulator.invalid', false],
    ['allowance left', keys.globexTest, 'one@example.com', true],
    ['allowance used up', keys.globexTest, 'two@example.com', false]
  ]
  for (const [index, [what, key, email, kept]] of withKey.entries()) {
    const idempotencyKey = { 'idempotency-key': `replay-${index}` }
    await dispatch(what, key, email, idempotencyKey)
    const again = await dispatch(`${what}, again`, key, email, idempotencyKey)
    t.equal(again.headers['idempotent-replayed'], kept ? 'true' : undefined, `${what}: ${kept ? 'replayed' : 'run again'}`)
  }
  await dispatch('same Idempotency-Key, other body', keys.acmeLive, 'carol@example.com', { 'idempotency-key': 'replay-0' })
  await exchange(main.app, 'dispatchCode', 'missing field', { method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: {} })
  await exchange(main.app, 'dispatchCode', 'broken JSON', { method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeLive), ...json }, payload: '{"email":' })
  await exchange(main.app, 'dispatchCode', 'malformed URL', { method: 'POST', url: '/otp/request%zz', headers: bearer(keys.acmeLive), payload: { email: 'a@example.com' } })
  await exchange(main.app, 'dispatchCode', 'too large', { method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeLive), ...json }, payload: JSON.stringify({ email: 'a'.repeat(5000) }) })
  await exchange(main.app, 'dispatchCode', 'not JSON', { method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeLive), 'content-type': 'text/plain' }, payload: 'a@example.com' })
  await dispatch('no key', null, 'a@example.com')
  await dispatch('revoked key', keys.acmeRevoked, 'a@example.com')
  await dispatch('origin not allowed', keys.acmeBrowser, 'a@example.com', { origin: 'https://evil.example' })
  await dispatch('secret key in a browser', keys.acmeLive, 'a@example.com', { origin: 'https://app.acme.test' })
  await exchange(main.app, 'dispatchCode', 'blocked network', { method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'a@example.com' }, remoteAddress: '192.0.2.7' })

  // Verify.
  await dispatch('sent', keys.acmeTest, 'vera@example.com')
  const [message] = (await get('listSandboxMessages', 'inbox', '/sandbox/messages?email=vera@example.com', keys.acmeTest)).json().data.messages
  const receipt = (await verify('right code', keys.acmeTest, { requestId: message.requestId, userGuess: message.code })).json().data.receipt
  const redeem = async (what: string, key: string | null, payload: unknown, headers: Record<string, string> = {}, app = main.app) =>
    await exchange(app, 'redeemReceipt', what, { method: 'POST', url: '/otp/receipts/redeem', headers: { ...(key === null ? {} : bearer(key)), ...headers }, payload: payload as string })
  await redeem('wrong address', keys.acmeTest, { receipt, email: 'someone.else@example.com' })
  await redeem('redeemed', keys.acmeTest, { receipt, email: 'vera@example.com' })
  await redeem('redeemed again', keys.acmeTest, { receipt, email: 'vera@example.com' })
  await redeem('no address', keys.acmeTest, { receipt })
  await redeem('forged', keys.acmeTest, { receipt: `${receipt.slice(0, -4)}AAAA`, anyAddress: true })
  await redeem('restricted key', keys.acmeBrowser, { receipt }, { origin: 'https://app.acme.test' })
  await redeem('no key', null, { receipt })
  await redeem('secret key in a browser', keys.acmeTest, { receipt }, { origin: 'https://app.acme.test' })
  await redeem('unknown field', keys.acmeTest, { receipt, extra: 1 })
  await exchange(main.app, 'redeemReceipt', 'broken JSON', { method: 'POST', url: '/otp/receipts/redeem', headers: { ...bearer(keys.acmeTest), ...json }, payload: '{' })
  await exchange(main.app, 'redeemReceipt', 'malformed URL', { method: 'POST', url: '/otp/receipts/redeem%zz', headers: bearer(keys.acmeTest), payload: {} })
  await exchange(main.app, 'redeemReceipt', 'too large', { method: 'POST', url: '/otp/receipts/redeem', headers: { ...bearer(keys.acmeTest), ...json }, payload: JSON.stringify({ receipt: 'a'.repeat(5000) }) })
  await exchange(main.app, 'redeemReceipt', 'not JSON', { method: 'POST', url: '/otp/receipts/redeem', headers: { ...bearer(keys.acmeTest), 'content-type': 'text/plain' }, payload: 'x' })
  await get('getReceiptKeys', 'keys', '/.well-known/jwks.json', null)
  await get('getReceiptKeys', 'malformed URL', '/.well-known/jwks.json%zz', null)
  await verify('used code', keys.acmeTest, { requestId: message.requestId, userGuess: message.code })
  await verify('not 6 digits', keys.acmeTest, { requestId: message.requestId, userGuess: 'abc' })
  await verify('missing field', keys.acmeTest, { requestId: message.requestId })
  await exchange(main.app, 'verifyCode', 'broken JSON', { method: 'POST', url: '/otp/verify', headers: { ...bearer(keys.acmeTest), ...json }, payload: '{' })
  await exchange(main.app, 'verifyCode', 'malformed URL', { method: 'POST', url: '/otp/verify%', headers: bearer(keys.acmeTest), payload: {} })
  await exchange(main.app, 'verifyCode', 'too large', { method: 'POST', url: '/otp/verify', headers: { ...bearer(keys.acmeTest), ...json }, payload: JSON.stringify({ requestId: 'a'.repeat(5000), userGuess: '1' }) })
  await exchange(main.app, 'verifyCode', 'not JSON', { method: 'POST', url: '/otp/verify', headers: { ...bearer(keys.acmeTest), 'content-type': 'text/plain' }, payload: 'x' })
  await verify('no key', null, { requestId: 'x', userGuess: '123456' })
  await verify('origin not allowed', keys.acmeBrowser, { requestId: 'x', userGuess: '123456' }, { origin: 'https://evil.example' })

  // Usage, sandbox inbox, health.
  await get('getUsage', 'usage', '/usage', keys.acmeLive)
  await get('getUsage', 'restricted key', '/usage', keys.acmeBrowser, { origin: 'https://app.acme.test' })
  await get('getUsage', 'no key', '/usage', null)
  await get('getUsage', 'malformed URL', '/usage%zz', keys.acmeLive)
  const story = `/verifications/${String(message.requestId)}`
  await get('getVerification', 'story', story, keys.acmeTest)
  await get('getVerification', 'the other mode', story, keys.acmeLive)
  await get('getVerification', 'unknown', '/verifications/otp_unknownRequest0000000', keys.acmeTest)
  await get('getVerification', 'too long', `/verifications/${'a'.repeat(300)}`, keys.acmeTest)
  await get('getVerification', 'restricted key', story, keys.acmeBrowser, { origin: 'https://app.acme.test' })
  await get('getVerification', 'no key', story, null)
  await get('getVerification', 'secret key in a browser', story, keys.acmeTest, { origin: 'https://app.acme.test' })
  await get('getVerification', 'malformed URL', `${story}%zz`, keys.acmeTest)
  await get('getInsights', 'insights', '/insights?granularity=hour', keys.acmeTest)
  await get('getInsights', 'bad range', '/insights?from=yesterday', keys.acmeTest)
  await get('getInsights', 'range too long', '/insights?granularity=hour&from=2000-01-01T00:00:00Z', keys.acmeTest)
  await get('getInsights', 'unknown parameter', '/insights?tenant=globex', keys.acmeTest)
  await get('getInsights', 'restricted key', '/insights', keys.acmeBrowser, { origin: 'https://app.acme.test' })
  await get('getInsights', 'no key', '/insights', null)
  await get('listSandboxMessages', 'live key', '/sandbox/messages?email=vera@example.com', keys.acmeLive)
  await get('listSandboxMessages', 'no address', '/sandbox/messages', keys.acmeTest)
  await get('listSandboxMessages', 'refused address', '/sandbox/messages?email=nope', keys.acmeTest)
  await get('listSandboxMessages', 'no key', '/sandbox/messages?email=vera@example.com', null)
  await get('listSandboxMessages', 'secret key in a browser', '/sandbox/messages?email=vera@example.com', keys.acmeTest, { origin: 'https://app.acme.test' })
  await get('getLiveness', 'alive', '/healthz', null)
  await get('getLiveness', 'malformed URL', '/healthz%zz', null)
  await get('getReadiness', 'ready', '/readyz', null)
  await get('getReadiness', 'malformed URL', '/readyz%', null)
  const recipientCall = (operationId: string, url: string) => async (what: string, key: string | null, payload: unknown, headers: Record<string, string> = {}, app = main.app) =>
    await exchange(app, operationId, what, { method: 'POST', url, headers: { ...(key === null ? {} : bearer(key)), ...headers }, payload: payload as string })
  const unlock = recipientCall('unlockRecipient', '/recipients/unlock')
  const suppress = recipientCall('suppressRecipient', '/recipients/suppress')
  const unsuppress = recipientCall('unsuppressRecipient', '/recipients/unsuppress')
  for (const [operationId, url, call] of [['unlockRecipient', '/recipients/unlock', unlock], ['suppressRecipient', '/recipients/suppress', suppress], ['unsuppressRecipient', '/recipients/unsuppress', unsuppress]] as const) {
    await call('done', keys.acmeLive, { email: 'ada@example.com' })
    await call('refused address', keys.acmeLive, { email: 'nope' })
    await call('restricted key', keys.acmeBrowser, { email: 'ada@example.com' }, { origin: 'https://app.acme.test' })
    await call('no key', null, { email: 'ada@example.com' })
    await call('secret key in a browser', keys.acmeLive, { email: 'ada@example.com' }, { origin: 'https://app.acme.test' })
    await call('unknown field', keys.acmeLive, { email: 'ada@example.com', extra: 1 })
    await exchange(main.app, operationId, 'broken JSON', { method: 'POST', url, headers: { ...bearer(keys.acmeLive), ...json }, payload: '{' })
    await exchange(main.app, operationId, 'malformed URL', { method: 'POST', url: `${url}%zz`, headers: bearer(keys.acmeLive), payload: {} })
    await exchange(main.app, operationId, 'too large', { method: 'POST', url, headers: { ...bearer(keys.acmeLive), ...json }, payload: JSON.stringify({ email: 'a'.repeat(5000) }) })
    await exchange(main.app, operationId, 'not JSON', { method: 'POST', url, headers: { ...bearer(keys.acmeLive), 'content-type': 'text/plain' }, payload: 'x' })
  }
  const feedback = async (what: string, payload: string, contentType = 'text/plain; charset=UTF-8') =>
    await exchange(main.app, 'receiveSesFeedback', what, { method: 'POST', url: '/feedback/ses', headers: { 'content-type': contentType }, payload })
  await feedback('not JSON', '{')
  await feedback('not an SNS message', '{"hello":"world"}')
  await feedback('a topic not listed', JSON.stringify({ Type: 'Notification', MessageId: 'm-1', TopicArn: 'arn:aws:sns:eu-west-1:1:x', Timestamp: new Date().toISOString(), SigningCertURL: 'https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-a.pem', Message: '{}', Signature: 'x', SignatureVersion: '2' }))
  await feedback('too large', JSON.stringify({ Message: 'a'.repeat(300_000) }))
  await feedback('XML', '<x/>', 'application/xml')
  await exchange(main.app, 'receiveSesFeedback', 'malformed URL', { method: 'POST', url: '/feedback/ses%zz', headers: { 'content-type': 'text/plain' }, payload: '{}' })
  await suppress('suppress', keys.acmeLive, { email: 'sam@example.com' })
  await dispatch('suppressed mailbox', keys.acmeLive, 'sam@example.com')
  await unsuppress('lift', keys.acmeLive, { email: 'sam@example.com' })
  const preview = async (what: string, key: string | null, payload: unknown, headers: Record<string, string> = {}, app = main.app) =>
    await exchange(app, 'previewTemplate', what, { method: 'POST', url: '/templates/preview', headers: { ...(key === null ? {} : bearer(key)), ...headers }, payload: payload as string })
  await preview('rendered', keys.acmeLive, {})
  await preview('in French, with a sample code', keys.acmeTest, { locale: 'fr-CA', code: '042917', minutes: 5 })
  await preview('a language the tenant has not', keys.acmeLive, { locale: 'ja' })
  await preview('restricted key', keys.acmeBrowser, {}, { origin: 'https://app.acme.test' })
  await preview('no key', null, {})
  await preview('secret key in a browser', keys.acmeLive, {}, { origin: 'https://app.acme.test' })
  await preview('unknown field', keys.acmeLive, { brand: 'x' })
  for (const [operationId, method, url] of [['dispatchCode', 'POST', '/otp/request'], ['verifyCode', 'POST', '/otp/verify'], ['getUsage', 'GET', '/usage'], ['getVerification', 'GET', '/verifications/otp_unknownRequest0000000'], ['previewTemplate', 'POST', '/templates/preview']] as const) {
    await exchange(main.app, operationId, 'a refused tenant', { method, url, headers: bearer(refusedKey), ...(method === 'POST' ? { payload: {} } : {}) })
  }
  await exchange(main.app, 'previewTemplate', 'broken JSON', { method: 'POST', url: '/templates/preview', headers: { ...bearer(keys.acmeLive), ...json }, payload: '{' })
  await exchange(main.app, 'previewTemplate', 'malformed URL', { method: 'POST', url: '/templates/preview%zz', headers: bearer(keys.acmeLive), payload: {} })
  await exchange(main.app, 'previewTemplate', 'too large', { method: 'POST', url: '/templates/preview', headers: { ...bearer(keys.acmeLive), ...json }, payload: JSON.stringify({ locale: 'a'.repeat(5000) }) })
  await exchange(main.app, 'previewTemplate', 'not JSON', { method: 'POST', url: '/templates/preview', headers: { ...bearer(keys.acmeLive), 'content-type': 'text/plain' }, payload: 'x' })
  await dispatch('End-User-IP from a restricted key', keys.acmeBrowser, 'a@example.com', { origin: 'https://app.acme.test', 'end-user-ip': '198.51.100.1' })

  // Velocity limits: 429 with the limit's state. The key's bucket counts the two dispatches
  // that reach it (the one stopped at its recipient's bucket does not) and the verify of a live
  // code; a verify of an unknown requestId counts only the caller's own bucket.
  const limited = await buildApp(t, { TENANTS_FILE: path, RATE_LIMIT_RECIPIENT: '1/1m', RATE_LIMIT_KEY: '2/1m', RATE_LIMIT_ACCOUNT: '1/1m', RATE_LIMIT_PUBLIC: '1/1m' })
  const dora = await dispatch('first', keys.acmeLive, 'dora@example.com', {}, limited.app)
  await dispatch('recipient limit', keys.acmeLive, 'dora@example.com', {}, limited.app)
  await dispatch('second', keys.acmeLive, 'eve@example.com', {}, limited.app)
  await verify('wrong code', keys.acmeLive, { requestId: 'abc', userGuess: '000000' }, {}, limited.app)
  await verify('key limit', keys.acmeLive, { requestId: dora.json().data.requestId, userGuess: '000000' }, {}, limited.app)
  for (const what of ['first', 'account limit']) {
    await get('getUsage', what, '/usage', keys.acmeTest, {}, limited.app)
    await get('getVerification', what, '/verifications/otp_unknownRequest0000000', keys.acmeTest, {}, limited.app)
    await get('getInsights', what, '/insights', keys.acmeTest, {}, limited.app)
    await get('listSandboxMessages', what, '/sandbox/messages?email=dora@example.com', keys.acmeTest, {}, limited.app)
    await unlock(what, keys.acmeTest, { email: 'dora@example.com' }, {}, limited.app)
    await suppress(what, keys.acmeTest, { email: 'dora@example.com' }, {}, limited.app)
    await unsuppress(what, keys.acmeTest, { email: 'dora@example.com' }, {}, limited.app)
    await get('getReadiness', what, '/readyz', null, {}, limited.app)
    await get('getReceiptKeys', what === 'first' ? what : 'public limit', '/.well-known/jwks.json', null, {}, limited.app)
    await redeem(what, keys.acmeTest, { receipt }, {}, limited.app)
    await preview(what, keys.acmeTest, {}, {}, limited.app)
  }

  // A duplicate while the first is still delivering: 409.
  const slow = await buildApp(t, { TENANTS_FILE: path, MAIL_TIMEOUT_MS: '5000' })
  const inFlight = { 'idempotency-key': 'slow-one' }
  const first = dispatch('slow delivery', keys.acmeTest, 'slow@simulator.invalid', inFlight, slow.app)
  // The first holds its key from the moment it is admitted until its delivery times out.
  const held = slow.app.state.idempotency
  await until('the first dispatch to hold its Idempotency-Key', () => held instanceof MemoryIdempotencyStore && held.size === 1)
  const duplicate = await dispatch('duplicate in flight', keys.acmeTest, 'slow@simulator.invalid', inFlight, slow.app)
  t.equal(duplicate.statusCode, 409, 'a duplicate while the first is in flight')
  await first

  // The memory store full: 503.
  const full = await buildApp(t, { TENANTS_FILE: path, MEMORY_STORE_MAX_TOKENS: '1' })
  await dispatch('fills the store', keys.acmeLive, 'eve@example.com', {}, full.app)
  await dispatch('store full', keys.acmeLive, 'fay@example.com', {}, full.app)

  // Redis unreachable: every keyed operation answers 503, the service is not ready.
  const down = await buildApp(t, { TENANTS_FILE: path, REDIS_URL: `redis://127.0.0.1:${await freePort()}`, OTP_HMAC_KEYS: TEST_HMAC_KEYS, REDIS_COMMAND_TIMEOUT_MS: '200' })
  await dispatch('store down', keys.acmeTest, 'gus@example.com', {}, down.app)
  await verify('store down', keys.acmeTest, { requestId: 'abc', userGuess: '123456' }, {}, down.app)
  await get('getUsage', 'store down', '/usage', keys.acmeLive, {}, down.app)
  await get('getVerification', 'store down', '/verifications/otp_unknownRequest0000000', keys.acmeLive, {}, down.app)
  await get('getInsights', 'store down', '/insights', keys.acmeLive, {}, down.app)
  await unlock('store down', keys.acmeTest, { email: 'gus@example.com' }, {}, down.app)
  await suppress('store down', keys.acmeTest, { email: 'gus@example.com' }, {}, down.app)
  await unsuppress('store down', keys.acmeTest, { email: 'gus@example.com' }, {}, down.app)
  await redeem('store down', keys.acmeTest, { receipt }, {}, down.app)
  await preview('store down: still rendered', keys.acmeTest, {}, {}, down.app)
  await get('listSandboxMessages', 'store down', '/sandbox/messages?email=gus@example.com', keys.acmeTest, {}, down.app)
  await get('getReadiness', 'store down', '/readyz', null, {}, down.app)

  // An expectation other than 100-continue: every operation answers 417 EXPECTATION_FAILED once its caller is known.
  const expectations: Array<[string, 'GET' | 'POST', string, string | null]> = [
    ['dispatchCode', 'POST', '/otp/request', keys.acmeLive], ['verifyCode', 'POST', '/otp/verify', keys.acmeLive],
    ['getUsage', 'GET', '/usage', keys.acmeLive], ['getVerification', 'GET', '/verifications/otp_unknownRequest0000000', keys.acmeTest],
    ['getInsights', 'GET', '/insights', keys.acmeLive], ['listSandboxMessages', 'GET', '/sandbox/messages?email=vera@example.com', keys.acmeTest],
    ['unlockRecipient', 'POST', '/recipients/unlock', keys.acmeLive], ['suppressRecipient', 'POST', '/recipients/suppress', keys.acmeLive],
    ['unsuppressRecipient', 'POST', '/recipients/unsuppress', keys.acmeLive], ['redeemReceipt', 'POST', '/otp/receipts/redeem', keys.acmeTest],
    ['previewTemplate', 'POST', '/templates/preview', keys.acmeLive], ['getReceiptKeys', 'GET', '/.well-known/jwks.json', null],
    ['getLiveness', 'GET', '/healthz', null], ['getReadiness', 'GET', '/readyz', null], ['receiveSesFeedback', 'POST', '/feedback/ses', null]
  ]
  for (const [operationId, method, url, key] of expectations) {
    const answer = await exchange(main.app, operationId, 'an unknown expectation', {
      method, url, headers: { ...(key === null ? {} : bearer(key)), ...(method === 'POST' ? json : {}), expect: '200-ok' }, ...(method === 'POST' ? { payload: '{}' } : {})
    })
    t.equal(answer.statusCode, 417, `${operationId}: an unknown expectation is 417`)
  }

  const document = (await main.app.inject({ method: 'GET', url: '/openapi.json' })).json<Document>()
  const operations = new Map(Object.values(document.paths).flatMap((item) => Object.values(item)).map((operation) => [operation.operationId, operation]))
  const seen = new Map<string, Set<string>>()
  for (const { operationId, what, answer } of exchanges) {
    const status = String(answer.statusCode)
    const where = `${operationId} ${status} (${what})`
    const documented = operations.get(operationId)?.responses[status]
    if (documented === undefined) {
      t.fail(`${where}: the status is not documented`, { body: answer.body })
      continue
    }
    const listed = documented.content?.['application/json']?.schema.allOf?.[1]?.properties?.code?.enum
    if (listed !== undefined) t.ok(listed.includes(answer.json().code), `${where}: ${String(answer.json().code)} is listed`)
    const documentedHeaders = Object.keys(documented.headers ?? {})
    const sent = Object.keys(answer.headers).filter((name) => !notTheApi.has(name))
    const undocumented = sent.filter((name) => !documentedHeaders.some((header) => header.toLowerCase() === name))
    t.same(undocumented, [], `${where}: every header sent is documented`)
    for (const [header, { required }] of Object.entries(documented.headers ?? {})) {
      if (required === true) t.ok(answer.headers[header.toLowerCase()], `${where}: ${header} is always sent`)
    }
    seen.set(`${operationId} ${status}`, new Set([...seen.get(`${operationId} ${status}`) ?? [], ...sent]))
  }

  for (const [operationId, operation] of operations) {
    for (const [status, response] of Object.entries(operation.responses)) {
      const answers = seen.get(`${operationId} ${status}`)
      if (answers === undefined) {
        t.ok(notExercised.has(`${operationId} ${status}`), `${operationId} ${status} was exercised (or is listed as out of reach, with why)`)
        continue
      }
      for (const header of Object.keys(response.headers ?? {})) {
        t.ok(answers.has(header.toLowerCase()), `${operationId} ${status}: ${header}, documented, was sent at least once`)
      }
    }
  }
  for (const [answer, why] of notExercised) t.notOk(seen.has(answer), `${answer} is out of reach (${why}): if a test reaches it now, take it off the list`)
})
