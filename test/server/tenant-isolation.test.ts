/*
 * A real process, over real sockets: a tenant whose template fails a check is refused alone.
 * Its keys answer 503 TENANT_MISCONFIGURED, /readyz details and the metrics name it, one log
 * line names it and the JSON pointers of its problems; the other tenant dispatches. A reload
 * with a JSON typo right after a secret's first characters logs the position, not the secret.
 */
import { once } from 'node:events'
import { randomBytes } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import t from 'tap'
import { TEST_METRICS_TOKEN, writeTenants } from '../helper.js'
import { post, startServer } from '../support/service-process.js'

/** A text part whose test render counts far more work than the load allows. */
const COSTLY = '{{ code }}{% for i in (1..700) %}{% for j in (1..700) %}x{% endfor %}{% endfor %}'

t.test('a tenant whose template fails a check is refused alone; the others are served', async (t) => {
  const secret = `whsec_${randomBytes(32).toString('base64')}`
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.templates = { en: { text: COSTLY } }
    file.tenants[1]!.webhooks = [{ url: 'https://hooks.globex.example/otp', secret, events: ['verification.succeeded'] }]
  })
  const server = await startServer(t, { TENANTS_FILE: path, METRICS_TOKEN: TEST_METRICS_TOKEN })

  const served = await post(server.base, '/otp/request', keys.globexTest, { email: 'jo@example.com' })
  t.equal(served.status, 200, 'the other tenant dispatches')
  const refused = await post(server.base, '/otp/request', keys.acmeLive, { email: 'jo@example.com' })
  t.same({ status: refused.status, code: refused.body.code }, { status: 503, code: 'TENANT_MISCONFIGURED' }, 'the refused tenant\'s key answers the stable 503')
  const unknown = await post(server.base, '/otp/request', keys.acmeRevoked, { email: 'jo@example.com' })
  t.equal(unknown.status, 401, 'its revoked key is still a 401')

  const ready = await fetch(`${server.base}/readyz`, { headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })
  const details = await ready.json() as { ready: boolean, tenants: { refused: unknown[] } }
  t.equal(ready.status, 200, 'a refused tenant does not make the instance unready')
  t.same(details.tenants.refused, [{ tenant: 'acme', serving: 'none', problems: ['/tenants/0/templates/en/text'] }], '/readyz details name it')

  const metrics = await (await fetch(`${server.base}/metrics`, { headers: { authorization: `Bearer ${TEST_METRICS_TOKEN}` } })).text()
  t.match(metrics, /^email_otp_tenants_refused\{tenant="acme",serving="none"\} 1$/m, 'the metric names it')
  t.notMatch(metrics, /email_otp_tenants_refused\{tenant="globex"/)

  const logged = server.output().split('\n').filter((line) => line.includes('"msg":"tenant refused')).map((line) => JSON.parse(line) as { tenant: string, pointers: string[], problems: string[] })
  t.same(logged.map(({ tenant, pointers }) => ({ tenant, pointers })), [{ tenant: 'acme', pointers: ['/tenants/0/templates/en/text'] }], 'one log line names the tenant and the pointers')
  t.match(logged[0]?.problems, [/^\/tenants\/0\/templates\/en\/text \(tenant acme, locale en, text\): .* units of work/], 'and the rule')

  // A typo: the secret's opening quote left out (JSON.parse's message then quotes its start).
  const text = readFileSync(path, 'utf8')
  writeFileSync(path, text.replace(`"${secret}"`, `${secret}"`))
  const mark = server.output().length
  server.child.kill('SIGHUP')
  await server.waitFor(/"trigger":"signal","msg":"tenants file reload failed; keeping the previous tenants"/, mark)
  const failure = server.output().slice(mark)
  t.match(failure, /is not valid JSON: [^"]* at line \d+, column \d+ \(in \/tenants\/1\/webhooks\/0\/secret\)/, 'the log says where')
  t.notOk(failure.includes(secret.slice(6, 10)), 'and nothing of the secret')
  t.equal((await post(server.base, '/otp/request', keys.globexTest, { email: 'jo@example.com' })).status, 200, 'the previous tenants stay in force')

  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  t.equal((await exited)[0], 0)
})
