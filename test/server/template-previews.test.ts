/*
 * The stall guard of npm test for template previews (the measurement, with its bound of 50 ms,
 * is test/abuse/template-preview.abuse.ts): a real process, one tenant previewing its costliest
 * accepted template from one source with several keys and no per-tenant rate limit, while
 * another source polls /healthz and a calm tenant dispatches and verifies. Generous bounds, for
 * a busy 2-core machine: nothing stalls, every calm flow succeeds.
 */
import t from 'tap'
import { TenantTemplates } from '../../lib/mail/templating/tenant-templates.js'
import { attackDeployment, costliestPart, latencies, percentile, report, runAttack } from '../support/preview-attack.js'
import { startServer } from '../support/service-process.js'

const STALL_GUARD_MS = 500

// Whether a template is accepted depends on the work its test renders count, not on the clock:
// the attack below needs its template accepted on any machine, however busy.
t.test('the costliest template is accepted at load', async (t) => {
  const templates = { en: { subject: costliestPart('subject'), text: costliestPart('text'), html: costliestPart('html') } }
  t.doesNotThrow(() => TenantTemplates.load({ templates }, { folder: null, brand: 'Acme' }))
})

t.test('a tenant flooding previews of its costliest template does not stall the others', async (t) => {
  const deployment = attackDeployment(t, 4)
  const server = await startServer(t, { TENANTS_FILE: deployment.path, LOG_LEVEL: 'warn', RATE_LIMIT_PREVIEW: '1000000/1m' })
  const figures = await runAttack(t, Number(new URL(server.base).port), deployment, { baselineMs: 1000, attackMs: 3000, loops: 4 })
  for (const line of report(figures)) t.comment(line)
  const during = figures.health.during.map((result) => result.ms)
  t.same([...new Set(figures.health.during.map((result) => result.status))], [200], '/healthz kept answering 200')
  t.ok(percentile(during, 0.99) < STALL_GUARD_MS, `no stall of /healthz (${latencies(during)})`)
  t.ok(figures.calm.during.length > 0, 'the calm tenant kept dispatching')
  t.same([...figures.calm.before, ...figures.calm.during].filter((flow) => !flow.ok).map((flow) => flow.problem), [], 'every calm dispatch was delivered and verified')
  t.ok((figures.attacker.get('200 rendered') ?? 0) > 0, 'the attacker\'s previews were rendered')
})
