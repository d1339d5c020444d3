import { readFileSync } from 'node:fs'
import t from 'tap'
import { createClient, EmailOtpError, type EmailOtpClient, type Fetch } from '../../clients/typescript/src/index.js'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { startServer } from '../support/service-process.js'

/**
 * The typed client covers every operation of openapi.json: each method against the real
 * service (a process on the embedded default, with the demo tenant's secret sandbox key), and
 * a check that fails when the document gains an operation no method calls.
 */

/** Operations of the document that are not the tenant's to call, and why. */
const NOT_FOR_THE_CLIENT = new Map([
  ['receiveSesFeedback', 'SNS posts it, signed by AWS; no tenant calls it']
])

/** One call of every method, whatever it answers. */
const EVERY_METHOD: Record<keyof EmailOtpClient, (client: EmailOtpClient) => Promise<unknown>> = {
  dispatch: async (client) => await client.dispatch('ada@example.com'),
  verify: async (client) => await client.verify('otp_request', '123456'),
  redeemReceipt: async (client) => await client.redeemReceipt('a.b.c', { email: 'ada@example.com' }),
  sandboxMessages: async (client) => await client.sandboxMessages('ada@example.com'),
  usage: async (client) => await client.usage(),
  verification: async (client) => await client.verification('otp_request'),
  insights: async (client) => await client.insights({ granularity: 'hour' }),
  unlockRecipient: async (client) => await client.unlockRecipient('ada@example.com'),
  suppressRecipient: async (client) => await client.suppressRecipient('ada@example.com'),
  unsuppressRecipient: async (client) => await client.unsuppressRecipient('ada@example.com'),
  previewTemplate: async (client) => await client.previewTemplate(),
  receiptKeys: async (client) => await client.receiptKeys(),
  liveness: async (client) => await client.liveness(),
  readiness: async (client) => await client.readiness()
}

t.test('every operation of openapi.json has a client method', async (t) => {
  const document = JSON.parse(readFileSync(new URL('../../openapi.json', import.meta.url), 'utf8')) as { paths: Record<string, Record<string, { operationId: string }>> }
  // A path's parameters (`{requestId}`) match one segment of the request.
  const operations = Object.entries(document.paths).flatMap(([path, item]) => Object.entries(item).map(([method, operation]) => ({
    pattern: new RegExp(`^${method.toUpperCase()} ${path.replace(/\{[^}]+\}/g, '[^/]+')}$`),
    id: operation.operationId
  })))
  const operationOf = { has: (request: string) => operations.some(({ pattern }) => pattern.test(request)), get: (request: string) => operations.find(({ pattern }) => pattern.test(request))?.id }
  const called = new Set<string>()
  // Records what each method asks for; answers nothing the client accepts.
  const recording: Fetch = async (url, init) => {
    called.add(`${init.method ?? 'GET'} ${new URL(url).pathname}`)
    return new Response('{}', { status: 418 })
  }
  const client = createClient({ baseUrl: 'http://otp.invalid', apiKey: 'sk_test_x', fetch: recording, retries: 0 })
  for (const call of Object.values(EVERY_METHOD)) await call(client).catch(() => {})
  t.same([...called].filter((request) => !operationOf.has(request)), [], 'every request a method makes is an operation of the document')
  const covered = new Set([...called].map((request) => operationOf.get(request)))
  const missing = operations.map(({ id }) => id).filter((operation) => !covered.has(operation) && !NOT_FOR_THE_CLIENT.has(operation))
  t.same(missing, [], 'every operation of the document is called by a method (or listed as not the client\'s, with why)')
})

t.test('each method against the running service, typed by the document', async (t) => {
  const service = await startServer(t, {})
  const client = createClient({ baseUrl: service.base, apiKey: DEMO_SANDBOX_KEY })
  const email = `ops-${process.pid}+client@example.com`

  t.same(await client.liveness(), { ok: true })
  t.equal((await client.readiness()).ready, true)
  const keys = await client.receiptKeys()
  t.ok(keys.keys.length > 0 && keys.keys.every((key) => key.use === 'sig'), 'the receipt keys')

  const sent = await client.dispatch(email)
  const [message, ...older] = await client.sandboxMessages(email)
  t.same([message?.requestId, message?.to, older.length], [sent.requestId, email, 0], 'the sandbox inbox of an address with a +, encoded in the query')
  t.same((await client.sandboxMessages(email, { requestId: 'otp_someOtherRequest00000' })), [], 'filtered by requestId')
  const { receipt } = await client.verify(sent.requestId, message?.code ?? '')

  const other = await client.redeemReceipt(receipt, { email: 'someone.else@example.com' }).catch((error: unknown) => error)
  t.same(other instanceof EmailOtpError ? [other.status, other.code] : other, [400, 'RECEIPT_ADDRESS_MISMATCH'], 'another address is refused')
  const claims = await client.redeemReceipt(receipt, { email })
  t.match(claims, { tenant: 'demo', mode: 'test', requestId: sent.requestId, addressHash: /^[\w-]{22}$/ }, 'redeemed for the address: its claims')
  const again = await client.redeemReceipt(receipt, { anyAddress: true }).catch((error: unknown) => error)
  t.same(again instanceof EmailOtpError ? [again.status, again.code] : again, [409, 'RECEIPT_ALREADY_REDEEMED'], 'once')

  const usage = await client.usage()
  t.match(usage, { tenant: 'demo', tier: String, sandbox: { used: Number, remaining: Number } })
  t.ok(usage.sandbox.used >= 1, 'the dispatch was counted')
  const story = await client.verification(sent.requestId)
  t.match(story, { requestId: sent.requestId, mode: 'test', state: 'verified', wrongGuesses: 0 }, "the verification's story")
  t.same(story.events.map((event) => event.type), ['requested', 'sent', 'verified', 'receipt_redeemed'])
  const unknown = await client.verification('otp_unknownRequest0000000').catch((error: unknown) => error)
  t.same(unknown instanceof EmailOtpError ? [unknown.status, unknown.code] : unknown, [404, 'NOT_FOUND'], 'an unknown requestId')
  const insights = await client.insights({ granularity: 'hour', from: new Date(Date.now() - 3_600_000) })
  t.match(insights, { granularity: 'hour', buckets: Array, totals: { requested: Number, conversion: Number } })
  t.ok(insights.totals.verified >= 1 && insights.totals.receiptsRedeemed >= 1, "the tenant's funnel counts the verification")
  const tooLong = await client.insights({ granularity: 'hour', from: '2000-01-01T00:00:00Z', to: new Date() }).catch((error: unknown) => error)
  t.same(tooLong instanceof EmailOtpError ? [tooLong.status, tooLong.code] : tooLong, [400, 'INSIGHTS_RANGE_TOO_LONG'], 'a range past its bound')

  t.same(await client.suppressRecipient(email).then((data) => typeof data.suppressedUntil), 'string')
  const refused = await client.dispatch(email).catch((error: unknown) => error)
  t.ok(refused instanceof EmailOtpError && refused.status >= 400, `a suppressed recipient gets no mail (${refused instanceof EmailOtpError ? refused.code : 'sent'})`)
  t.same(await client.unsuppressRecipient(email), { lifted: true })
  t.same(await client.unlockRecipient(email), { cleared: false }, 'no lock to clear')

  const preview = await client.previewTemplate({ code: '042917', locale: 'fr' })
  t.equal(preview.locale, 'fr')
  t.match(preview.html, /042917/, 'the sample code in the HTML part')
  const unknownLanguage = await client.previewTemplate({ locale: 'tlh' }).catch((error: unknown) => error)
  t.same(unknownLanguage instanceof EmailOtpError ? unknownLanguage.code : unknownLanguage, 'LOCALE_NOT_AVAILABLE', 'errors as EmailOtpError')
})
