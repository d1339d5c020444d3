/*
 * compose.yaml as `docker compose up` runs it, without Docker: the tenants file it mounts is
 * the one TENANTS_FILE names and loads with the service's rules, its live key's mail goes over
 * SMTP to the mailpit service, and the service started with compose's own environment (the
 * service names pointed at a redis-server and an SMTP server this test starts in their place)
 * hands the live key's message to the mail catcher, while a sandbox key's stays in the
 * sandbox inbox, as the comments of compose.yaml say.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { parse } from 'yaml'
import { parseConfig } from '../../lib/config/from-env.js'
import { hashKey } from '../../lib/keys/api-keys.js'
import { DEMO_RESTRICTED_KEY, DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { registryFromFile } from '../../lib/tenants-file/load.js'
import { startSmtp } from '../support/mail-peers.js'
import { redisTestOptions, startRedis } from '../support/redis.js'
import { post, startServer } from '../support/service-process.js'
import { until } from '../support/wait.js'

const root = fileURLToPath(new URL('../..', import.meta.url))
const text = readFileSync(join(root, 'compose.yaml'), 'utf8')

interface ComposeService { image?: string, environment?: Record<string, string>, volumes?: string[], ports?: string[] }
const compose = parse(text) as { services: Record<string, ComposeService> }
const service = compose.services['email-otp'] ?? {}
const environment = service.environment ?? {}

/** Mailpit's SMTP port: the image listens on 1025 unless MP_SMTP_BIND_ADDR says otherwise. */
const MAILPIT_SMTP_PORT = '1025'

/** The host file each container path is mounted from, as compose resolves a relative source. */
const mounts = new Map((service.volumes ?? []).map((volume) => {
  const [source = '', target = ''] = volume.split(':')
  return [target, source.startsWith('./') ? join(root, source) : source]
}))

/** The live key the comments of compose.yaml give the reader. */
const liveKey = /^#\s+(sk_live_[0-9A-Za-z]+)$/m.exec(text)?.[1] ?? ''
const tenantsFile = mounts.get(environment.TENANTS_FILE ?? '') ?? ''

t.test('the mounted tenants file has the documented live key beside the README\'s sandbox keys; SMTP goes to mailpit', async (t) => {
  t.match(liveKey, /^sk_live_/, 'compose.yaml names a live key')
  t.ok(tenantsFile !== '', `TENANTS_FILE (${environment.TENANTS_FILE ?? 'unset'}) is a mounted file`)
  t.match(service.volumes, [/:ro$/], 'mounted read-only')
  const registry = await registryFromFile(tenantsFile)
  t.same([...registry.refused.keys()], [], 'no tenant refused')
  const tenantOf = (key: string): string | undefined => registry.keysOf('demo').some(([hash]) => hash === hashKey(key)) ? 'demo' : undefined
  t.equal(tenantOf(liveKey), 'demo', 'the live key is the demo tenant\'s')
  t.equal(tenantOf(DEMO_SANDBOX_KEY), 'demo', 'the quick start\'s sandbox key works unchanged')
  t.equal(tenantOf(DEMO_RESTRICTED_KEY), 'demo', 'and the browser example\'s restricted key')
  t.ok((registry.tenants.get('demo')?.tier.live.limit ?? 0) > 0, 'the demo tier allows live mail')

  const config = parseConfig(environment)
  t.same(config.mailTransports, ['smtp'], 'live mail leaves over SMTP')
  const smtp = new URL(environment.SMTP_URL ?? '')
  t.equal(smtp.hostname, 'mailpit', 'to the mailpit service')
  t.equal(smtp.port, MAILPIT_SMTP_PORT, 'on Mailpit\'s SMTP port')
  t.ok(compose.services.mailpit?.ports?.some((port) => port.endsWith(':8025')), 'whose web UI is published')
})

t.test('with compose\'s environment, the live key\'s message reaches the mail catcher; a sandbox key\'s stays in the inbox', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const mailpit = await startSmtp(t)
  const { HOST: _host, PORT: _port, ...rest } = environment
  const running = await startServer(t, {
    ...rest,
    REDIS_URL: redis.url,
    SMTP_URL: `smtp://127.0.0.1:${mailpit.port}?tls=off`,
    TENANTS_FILE: tenantsFile
  })

  const live = await post(running.base, '/otp/request', liveKey, { email: 'live.trial@example.com' })
  t.equal(live.status, 200, `the live key dispatches: ${JSON.stringify(live.body)}`)
  if (live.status === 200) await until('the live message at the mail catcher', () => mailpit.received.length > 0, 60_000)
  const [message] = mailpit.received
  t.equal(message?.to !== undefined && !Array.isArray(message.to) ? message.to.text : '', 'live.trial@example.com')
  t.match(message?.text, /\b\d{6}\b/, 'with its code')

  const sandbox = await post(running.base, '/otp/request', DEMO_SANDBOX_KEY, { email: 'sandbox.trial@example.com' })
  t.equal(sandbox.status, 200)
  const inbox = await fetch(`${running.base}/sandbox/messages?email=sandbox.trial%40example.com`, { headers: { authorization: `Bearer ${DEMO_SANDBOX_KEY}` } })
  t.match(await inbox.json(), { data: { messages: [{ code: /^\d{6}$/ }] } }, 'the sandbox message is in the sandbox inbox')
  t.equal(mailpit.received.length, 1, 'and never reached the mail catcher')
})
