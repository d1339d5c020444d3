import { once } from 'node:events'
import { readFileSync, writeFileSync } from 'node:fs'
import { createServer as createHttpsServer } from 'node:https'
import { createServer as createTcpServer } from 'node:net'
import { join } from 'node:path'
import { getCACertificates, setDefaultCACertificates } from 'node:tls'
import t, { type Test } from 'tap'
import { Webhook } from 'standardwebhooks'
import { createServices, type Services, type ServicesLog } from '../../lib/compose.js'
import { parseConfig } from '../../lib/config/from-env.js'
import type { Caller } from '../../lib/otp/service.js'
import { MailCapture, TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { connectFailFast, redisTestOptions, startRedis } from '../support/redis.js'
import { until } from '../support/wait.js'
import { webhookSecret } from '../support/webhook-receiver.js'

const quiet = { info () {}, warn () {}, error () {}, child () { return quiet } }

/** What keeps the event loop alive, by kind (sockets, timers, watchers…), counted. */
function resources (): Map<string, number> {
  const counts = new Map<string, number>()
  for (const kind of process.getActiveResourcesInfo()) counts.set(kind, (counts.get(kind) ?? 0) + 1)
  return counts
}

/** The kinds of which more are alive now than in `before`. */
function leftOpen (before: Map<string, number>): string[] {
  return [...resources()].filter(([kind, count]) => count > (before.get(kind) ?? 0)).map(([kind]) => kind)
}

function callerFor (services: Services, key: string): Caller {
  const found = services.tenants.current.authenticate(key, Date.now())
  if (found === null) throw new Error('test setup: the key does not authenticate')
  return { key: found, address: '192.0.2.1', log: quiet }
}

/**
 * The whole graph from one call: a live code dispatched through `services.otp` and the log
 * mailer, then verified (a receipt, counted by the observer and in the usage report), the
 * sandbox read back; then close() releases everything it holds, and a second close() is harmless.
 */
async function roundTrip (t: Test, env: Record<string, string>): Promise<Services> {
  const { path, keys } = writeTenants(t)
  const config = parseConfig({ OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, ...env })
  const mail = new MailCapture()
  const counted: string[] = []
  const before = resources()
  const services = await createServices(config, {
    log: quiet,
    mailLog: mail,
    observers: {
      otp: {
        dispatched (_key, result) { counted.push('sentBy' in result ? `sent by ${result.sentBy}` : 'failed') },
        checked (_key, result) { counted.push(result) },
        locked () {},
        reviewed () {}
      }
    }
  })
  await services.start()

  const live = callerFor(services, keys.acmeLive)
  const { requestId } = await services.otp.dispatch(live, { email: 'ann@example.com' })
  t.equal(mail.count, 1, 'the log mailer printed the message')
  const { receipt } = await services.otp.verify(live, requestId, mail.codeFor('ann@example.com'))
  t.match(receipt, /^[\w-]+\.[\w-]+\.[\w-]+$/, 'a right guess answers a receipt')
  t.same(counted, ['sent by log', 'verified'], 'the observer counted both')
  const usage = await services.usage.report(live.key.tenant, Date.now())
  t.match(usage, { tenant: 'acme', tier: 'standard', live: { used: 1, limit: 1000 }, sandbox: { used: 0 } }, 'the usage report counts the dispatch')

  const preview = await services.previews.render(live.key.tenant, { code: '654321' }, { admit: async () => {}, onTemplateFallback () {} })
  t.match(preview, { locale: 'en', text: /654321/ }, 'a preview renders with the code given')

  const sandbox = callerFor(services, keys.acmeTest)
  const sent = await services.otp.dispatch(sandbox, { email: 'bob@example.com' })
  t.match(await services.sandbox.list(sandbox.key, 'bob@example.com', sent.requestId), [{ requestId: sent.requestId }], 'the sandbox message is read back')

  await services.close()
  await until('everything the services opened is closed', () => leftOpen(before).length === 0, 5000)
  t.same(leftOpen(before), [], 'nothing left open')
  await t.resolves(services.close(), 'a second close is harmless')
  t.same(leftOpen(before), [], 'and opens nothing again')
  return services
}

t.test('in memory', async (t) => {
  const services = await roundTrip(t, {})
  t.equal(services.state.kind, 'memory')
  t.equal(services.redis, null, 'no Redis connection')
})

t.test('on Redis', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })

  t.test('the connection it opens, closed by close()', async (t) => {
    const services = await roundTrip(t, { REDIS_URL: server.url })
    t.equal(services.state.kind, 'redis')
    t.equal(services.redis?.status, 'end', 'the Redis client is closed')
  })

  t.test('a connection of the caller\'s own stays open', async (t) => {
    const client = await connectFailFast(server.url)
    t.teardown(() => { client.disconnect() })
    const { path } = writeTenants(t)
    const services = await createServices(parseConfig({ OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_URL: server.url }), { log: quiet, mailLog: new MailCapture(), redis: client })
    t.equal(services.redis, client, 'the caller\'s client is the one used')
    t.equal(services.state.kind, 'redis')
    await services.close()
    t.equal(client.status, 'ready', 'still connected')
    t.equal(await client.ping(), 'PONG')
  })

  t.test('a tenants file that does not load: rejects, having closed the connection it opened', async (t) => {
    const dir = t.testdir({})
    const path = join(dir, 'tenants.json')
    writeFileSync(path, '{"tiers": {}, "tenants": [{"id": "acme"}')
    const before = resources()
    await t.rejects(createServices(parseConfig({ OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, REDIS_URL: server.url }), { log: quiet, mailLog: new MailCapture() }))
    await until('the connection is closed', () => leftOpen(before).length === 0, 5000)
    t.same(leftOpen(before), [], 'nothing left open')
  })
})

/** A loopback certificate (127.0.0.1, localhost) and its key, trusted by this process only. */
const LOOPBACK_CERT = readFileSync(new URL('../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')
const LOOPBACK_KEY = readFileSync(new URL('../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')

/** What a log line records: its level, message and fields. */
interface LogRecord { level: string, msg: string, fields: Record<string, unknown> }

function recordingLog (records: LogRecord[]): ServicesLog {
  const at = (level: string) => (fields: unknown, msg?: string): void => { records.push({ level, msg: msg ?? '', fields: fields as Record<string, unknown> }) }
  const log: ServicesLog = { info: at('info'), warn: at('warn'), error: at('error'), child: () => log }
  return log
}

t.test('WEBHOOK_ALLOWED_NETWORKS reaches the sender: an endpoint inside the networks is delivered to, one outside is never connected to', async (t) => {
  // The webhook sender makes its own TLS connections (no shared agent): the process's default CAs are what it trusts.
  const defaults = getCACertificates('default')
  setDefaultCACertificates([...defaults, LOOPBACK_CERT])
  t.teardown(() => { setDefaultCACertificates(defaults) })

  const secret = webhookSecret()
  const verifier = new Webhook(secret)
  const delivered: unknown[] = []
  const inside = createHttpsServer({ key: LOOPBACK_KEY, cert: LOOPBACK_CERT }, (request, response) => {
    let body = ''
    request.on('data', (chunk: Buffer) => { body += chunk.toString() })
    request.on('end', () => {
      delivered.push(verifier.verify(body, request.headers as Record<string, string>))
      response.writeHead(204).end()
    })
  })
  inside.listen(0, '127.0.0.1')
  await once(inside, 'listening')
  t.teardown(async () => { inside.closeAllConnections(); inside.close(); await once(inside, 'close') })
  // Outside the networks (a loopback address too, so that only the networks tell the two apart): counts connections.
  let outsideConnections = 0
  const outside = createTcpServer((socket) => { outsideConnections++; socket.destroy() })
  outside.listen(0, '127.0.0.2')
  await once(outside, 'listening')
  t.teardown(async () => { outside.close(); await once(outside, 'close') })
  const portOf = (server: { address: () => unknown }): number => (server.address() as { port: number }).port
  const insideUrl = `https://127.0.0.1:${portOf(inside)}/hooks`
  const outsideUrl = `https://127.0.0.2:${portOf(outside)}/hooks`

  const { path } = writeTenants(t, (file) => {
    file.tenants[0]!.webhooks = [{ url: insideUrl, secret, events: ['review.used'] }, { url: outsideUrl, secret, events: ['review.used'] }]
  })
  const records: LogRecord[] = []
  const services = await createServices(parseConfig({ OTP_HMAC_KEYS: TEST_HMAC_KEYS, TENANTS_FILE: path, WEBHOOK_ALLOWED_NETWORKS: '127.0.0.1/32' }), { log: recordingLog(records), mailLog: new MailCapture() })
  t.teardown(async () => { await services.close() })
  await services.start()
  const acme = services.tenants.current.tenants.get('acme')
  if (acme === undefined) throw new Error('test setup: no tenant acme')
  services.webhooks.emit(acme, 'live', 'review.used', { requestId: 'req_networks', addressHash: 'A'.repeat(22), keyId: 'acme_live', source: '192.0.2.1' })

  const failed = (url: string): LogRecord[] => records.filter((record) => record.msg === 'webhook attempt failed; retrying' && record.fields.url === url)
  await until('a first attempt at each endpoint', () => delivered.length + failed(insideUrl).length >= 1 && failed(outsideUrl).length >= 1)
  t.same(failed(insideUrl), [], 'inside 127.0.0.1/32: no attempt failed')
  t.match(delivered, [{ type: 'review.used', data: { tenant: 'acme', requestId: 'req_networks' } }], 'inside: delivered over https, signed, although loopback is not otherwise allowed')
  t.match(failed(outsideUrl)[0]?.fields, { error: /^refused: .*127\.0\.0\.2 is a loopback address/ }, 'outside: refused as loopback, the refusal logged')
  t.equal(outsideConnections, 0, 'outside: never connected to')
})
