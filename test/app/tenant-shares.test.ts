/**
 * Tenant shares over real sockets (TENANT_REQUESTS_WHEN_BUSY): while the event loop is busy
 * and another tenant has requests in flight, a tenant past its cap waits for one of its own
 * requests to finish, and the other tenant's requests start at once; with time to spare on
 * the loop nobody waits. Requests are kept in flight by a real SMTP server that holds every
 * message until the test lets it go.
 */
import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import { buildApp, TEST_HMAC_KEYS, TEST_METRICS_TOKEN, writeTenants } from '../helper.js'
import { listenApp, send, type RawAnswer } from '../support/http.js'
import { startSmtp } from '../support/mail-peers.js'
import { until } from '../support/wait.js'

interface Setup {
  port: number
  app: FastifyInstance
  acmeKey: string
  globexKey: string
  /** Messages the SMTP server holds now. */
  held: () => number
  /** Lets every held message, and every later one, through. */
  release: () => void
}

async function setup (t: Test): Promise<Setup> {
  let held = 0
  let release: () => void = () => {}
  const released = new Promise<void>((resolve) => { release = resolve })
  const smtp = await startSmtp(t, {
    onData (stream, _session, callback) {
      stream.resume()
      stream.on('end', () => {
        held++
        void released.then(() => {
          held--
          callback()
        })
      })
    }
  })
  const globexKey = generateKey('secret', 'live')
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants.find((tenant) => tenant.id === 'globex')?.keys.push({ id: 'globex_live', kind: 'secret', mode: 'live', sha256: hashKey(globexKey) })
  })
  const { app } = await buildApp(t, {
    TENANTS_FILE: path,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    MAIL_TRANSPORT: 'smtp',
    SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`,
    MAIL_FROM: 'codes@otp.test',
    MAIL_TIMEOUT_MS: '30000',
    TENANT_REQUESTS_WHEN_BUSY: '2'
  })
  t.teardown(() => { release() })
  return { port: await listenApp(app), app, acmeKey: keys.acmeLive, globexKey, held: () => held, release }
}

const dispatch = (port: number, key: string, email: string): Promise<RawAnswer> =>
  send({ port, path: '/otp/request', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ email }), timeoutMs: 60_000 })

const usage = (port: number, key: string): Promise<RawAnswer> =>
  send({ port, method: 'GET', path: '/usage', headers: { authorization: `Bearer ${key}` }, timeoutMs: 60_000 })

/** Keeps the event loop busy about three quarters of the time until stopped. */
function keepBusy (t: Test): () => void {
  const timer = setInterval(() => {
    const end = performance.now() + 15
    while (performance.now() < end) { /* busy, as a loop serving a flood is */ }
  }, 5)
  const stop = (): void => { clearInterval(timer) }
  t.teardown(stop)
  return stop
}

async function waited (app: FastifyInstance): Promise<number> {
  const answer = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  return Number(/^email_otp_tenant_requests_waited_total (\d+)/m.exec(answer.body)?.[1] ?? Number.NaN)
}

/** Whether the promise settles within `ms`. */
async function settlesWithin (promise: Promise<unknown>, ms: number): Promise<boolean> {
  return await Promise.race([promise.then(() => true, () => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms))])
}

test('on a busy loop, the tenant holding the most waits for its own requests; the other tenant is served at once', async (t) => {
  const { port, app, acmeKey, globexKey, held, release } = await setup(t)
  const stopBusy = keepBusy(t)
  // acme holds its cap (2) in flight, globex one: all three wait at the SMTP server.
  const acmeDispatches = [dispatch(port, acmeKey, 'one@example.com'), dispatch(port, acmeKey, 'two@example.com')]
  const globexDispatch = dispatch(port, globexKey, 'three@example.com')
  await until('the three messages to reach the SMTP server', () => held() === 3)

  const acmeUsage = usage(port, acmeKey)
  const globexUsage = await usage(port, globexKey)
  t.equal(globexUsage.status, 200, 'globex, below its cap, is answered while acme\'s requests are held')
  t.notOk(await settlesWithin(acmeUsage, 500), 'acme, past its cap and holding the most, waits')
  t.equal(await waited(app), 1, 'one request waited')

  release()
  t.same((await Promise.all(acmeDispatches)).map(({ status }) => status), [200, 200])
  t.equal((await acmeUsage).status, 200, 'once one of acme\'s own finished, its waiting request is answered')
  t.equal((await globexDispatch).status, 200)
  stopBusy()
})

test('with time to spare on the loop, nobody waits, whatever a tenant holds in flight', async (t) => {
  const { port, app, acmeKey, globexKey, held, release } = await setup(t)
  const acmeDispatches = [dispatch(port, acmeKey, 'one@example.com'), dispatch(port, acmeKey, 'two@example.com')]
  const globexDispatch = dispatch(port, globexKey, 'three@example.com')
  await until('the three messages to reach the SMTP server', () => held() === 3)
  await new Promise((resolve) => setTimeout(resolve, 100))

  const acmeUsage = usage(port, acmeKey)
  t.ok(await settlesWithin(acmeUsage, 5000), 'acme, past its cap, is answered while its dispatches are held')
  t.equal((await acmeUsage).status, 200)
  t.equal(await waited(app), 0, 'no request waited')
  release()
  t.same((await Promise.all([...acmeDispatches, globexDispatch])).map(({ status }) => status), [200, 200, 200])
})

test('TENANT_REQUESTS_WHEN_BUSY=0 switches the shares off', async (t) => {
  const { path } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, TENANT_REQUESTS_WHEN_BUSY: '0' })
  const answer = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  t.notMatch(answer.body, /email_otp_tenant_requests_waited_total/, 'no shares, no metric')
})
