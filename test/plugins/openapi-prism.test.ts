/*
 * The committed openapi.json as an API consumer's tools read it: Spectral's `spectral:oas`
 * rules (the repository's .spectral.yaml), and Stoplight Prism as a validating proxy in front
 * of the running service, through which every operation's happy path and a signed SNS post
 * pass with no violation, request or answer.
 */
import { createSign, randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { bearer, buildApp, writeTenants } from '../helper.js'
import { playHost } from '../support/https-hosts.js'
import { freePort } from '../support/redis.js'
import { spawnForTest } from '../support/service-process.js'
import { until } from '../support/wait.js'

const root = fileURLToPath(new URL('../../', import.meta.url))
const bin = (name: string): string => join(root, 'node_modules', '.bin', name)

t.test('Spectral (spectral:oas) finds nothing in openapi.json', async (t) => {
  const { child, output } = spawnForTest(t, [bin('spectral'), 'lint', '--quiet', '--format', 'json', '--ruleset', join(root, '.spectral.yaml'), join(root, 'openapi.json')], { PATH: process.env.PATH ?? '' })
  await once(child, 'exit')
  const text = output()
  const results = JSON.parse(text.slice(text.indexOf('['), text.lastIndexOf(']') + 1)) as Array<{ code: string, message: string, path: string[] }>
  t.same(results.map((result) => `${result.code} at ${result.path.join('.')}: ${result.message}`), [], 'no error, warning, info or hint')
})

const SNS_KEY = readFileSync(new URL('../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')
const SNS_CERT = readFileSync(new URL('../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')
const TOPIC = 'arn:aws:sns:eu-west-1:123456789012:ses-events'

/**
 * SNS's certificate host, played by a loopback HTTPS server (test/support/https-hosts.ts), so
 * the post names a certificate URL the default SNS_SIGNING_CERT_URL_PATTERN allows.
 */
async function certificateHost (t: Test): Promise<string> {
  const host = await playHost(t, 'sns.eu-west-1.amazonaws.com', (_request, response) => {
    response.writeHead(200, { 'content-type': 'application/x-pem-file' }).end(SNS_CERT)
  })
  return host.origin
}

/** An SES event notification, signed as SNS signs one (version 2), as SNS would post it. */
function snsNotification (certificateOrigin: string): string {
  const message: Record<string, string> = {
    Type: 'Notification',
    MessageId: randomUUID(),
    TopicArn: TOPIC,
    Message: JSON.stringify({ eventType: 'Delivery', mail: { messageId: 'not-ours', destination: ['ada@example.com'], tags: {} }, delivery: {} }),
    Timestamp: new Date().toISOString(),
    SigningCertURL: `${certificateOrigin}/SimpleNotificationService-0123456789abcdef.pem`
  }
  const signer = createSign('RSA-SHA256')
  for (const field of ['Message', 'MessageId', 'Timestamp', 'TopicArn', 'Type']) signer.update(`${field}\n${message[field] ?? ''}\n`)
  return JSON.stringify({ ...message, SignatureVersion: '2', Signature: signer.sign(SNS_KEY, 'base64') })
}

interface Passed { status: number, body: any, violations: string | null }

t.test('through Prism as a validating proxy, every operation\'s happy path and an SNS post answer with no violation', async (t) => {
  const certificateOrigin = await certificateHost(t)
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, {
    TENANTS_FILE: path,
    SES_FEEDBACK_TOPIC_ARNS: TOPIC
  })
  const upstream = await app.listen({ host: '127.0.0.1', port: 0 })
  const port = await freePort()
  const prism = spawnForTest(t, [bin('prism'), 'proxy', join(root, 'openapi.json'), upstream, '--host', '127.0.0.1', '--port', String(port), '--cors', 'false'], { PATH: process.env.PATH ?? '' })
  const base = `http://127.0.0.1:${port}`
  await until('Prism listening', async () => {
    if (prism.child.exitCode !== null) throw new Error(`prism exited: ${prism.output()}`)
    return await fetch(`${base}/healthz`).then(() => true, () => false)
  }, 60_000)

  const seen = new Map<string, Passed>()
  async function pass (operation: string, method: string, url: string, options: { key?: string, json?: unknown, text?: string } = {}): Promise<Passed> {
    const headers: Record<string, string> = options.key === undefined ? {} : bearer(options.key)
    let body: string | undefined
    if (options.json !== undefined) {
      headers['content-type'] = 'application/json'
      body = JSON.stringify(options.json)
    } else if (options.text !== undefined) {
      headers['content-type'] = 'text/plain; charset=UTF-8'
      body = options.text
    }
    const response = await fetch(base + url, { method, headers, ...(body === undefined ? {} : { body }) })
    const text = await response.text()
    const passed = { status: response.status, body: text === '' ? null : JSON.parse(text), violations: response.headers.get('sl-violations') }
    seen.set(operation, passed)
    t.equal(passed.violations, null, `${operation}: no violation (${passed.violations ?? 'none'})`)
    t.equal(passed.status, 200, `${operation}: 200 (${text.slice(0, 200)})`)
    return passed
  }

  const email = 'ada+prism@example.com'
  await pass('getLiveness', 'GET', '/healthz')
  await pass('getReadiness', 'GET', '/readyz')
  await pass('getReceiptKeys', 'GET', '/.well-known/jwks.json')
  const sent = await pass('dispatchCode', 'POST', '/otp/request', { key: keys.acmeTest, json: { email } })
  const inbox = await pass('listSandboxMessages', 'GET', `/sandbox/messages?email=${encodeURIComponent(email)}`, { key: keys.acmeTest })
  const [message] = inbox.body.data.messages
  const verified = await pass('verifyCode', 'POST', '/otp/verify', { key: keys.acmeTest, json: { requestId: sent.body.data.requestId, userGuess: message.code } })
  await pass('redeemReceipt', 'POST', '/otp/receipts/redeem', { key: keys.acmeTest, json: { receipt: verified.body.data.receipt, email } })
  await pass('getUsage', 'GET', '/usage', { key: keys.acmeTest })
  const story = await pass('getVerification', 'GET', `/verifications/${String(sent.body.data.requestId)}`, { key: keys.acmeTest })
  t.equal(story.body.data.state, 'verified', 'the story of the verification above')
  const insights = await pass('getInsights', 'GET', '/insights?granularity=hour', { key: keys.acmeTest })
  t.equal(insights.body.data.totals.verified, 1, 'the funnel of the verification above')
  await pass('unlockRecipient', 'POST', '/recipients/unlock', { key: keys.acmeTest, json: { email } })
  await pass('suppressRecipient', 'POST', '/recipients/suppress', { key: keys.acmeTest, json: { email } })
  await pass('unsuppressRecipient', 'POST', '/recipients/unsuppress', { key: keys.acmeTest, json: { email } })
  await pass('previewTemplate', 'POST', '/templates/preview', { key: keys.acmeTest, json: { locale: 'fr' } })
  const posted = await pass('receiveSesFeedback', 'POST', '/feedback/ses', { text: snsNotification(certificateOrigin) })
  t.equal(posted.body.message, 'ignored', 'the SNS post was read and its signature checked: an event of mail the service did not send')

  const document = JSON.parse(readFileSync(join(root, 'openapi.json'), 'utf8')) as { paths: Record<string, Record<string, { operationId: string }>> }
  const operations = Object.values(document.paths).flatMap((item) => Object.values(item).map((operation) => operation.operationId))
  t.same(operations.filter((operation) => !seen.has(operation)), [], 'every operation of the document went through the proxy')

  // The proxy does validate: a request the document does not allow is reported.
  const refused = await fetch(`${base}/otp/request`, { method: 'POST', headers: { ...bearer(keys.acmeTest), 'content-type': 'application/json' }, body: JSON.stringify({ address: email }) })
  await refused.arrayBuffer()
  t.match(refused.headers.get('sl-violations'), /email/, 'a body without its required field is a violation')
})
