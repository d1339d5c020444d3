/*
 * Stall everyone with one template (issue 24, item 2), against the real server process: one
 * tenant previews its costliest accepted template (test/support/preview-attack.ts) as fast
 * as the service lets it, from one source with several keys, while another source polls
 * /healthz and a calm tenant dispatches and verifies codes from a third. The bound: /healthz
 * p99 under 50 ms during the attack, and every calm flow succeeds. First with the default
 * per-tenant preview limit, then with it raised out of the way, where only the render budget
 * and the per-tenant share of the process's time (one preview at a time) stand between the
 * attacker and the event loop. The figures printed are those docs/security.md quotes.
 */
import t from 'tap'
import { attackDeployment, latencies, percentile, report, runAttack } from '../support/preview-attack.js'
import { startServer } from '../support/service-process.js'

const HEALTH_P99_BOUND_MS = 50
const KEYS = 8
const IN_FLIGHT = KEYS

// The per-key limit of account routes (RATE_LIMIT_ACCOUNT) stays out of the way, as in every
// test: the calm tenant reads its codes from its sandbox inbox, an account route.
for (const [scenario, limit] of [['the default per-tenant preview limit', '60/1m'], ['no per-tenant rate limit (only the render budget and the per-tenant time share)', '1000000/1m']] as const) {
  t.test(`one tenant floods previews of its costliest template: ${scenario}`, async (t) => {
    const deployment = attackDeployment(t, KEYS)
    const server = await startServer(t, { TENANTS_FILE: deployment.path, LOG_LEVEL: 'warn', RATE_LIMIT_PREVIEW: limit })
    const port = Number(new URL(server.base).port)
    const figures = await runAttack(t, port, deployment, { baselineMs: 5000, attackMs: 20_000, loops: IN_FLIGHT })
    for (const line of report(figures)) t.comment(line)

    const during = figures.health.during.map((result) => result.ms)
    t.ok(during.length >= 200, `/healthz kept being answered (${during.length} probes)`)
    t.same([...new Set(figures.health.during.map((result) => result.status))], [200], 'every /healthz answered 200')
    t.ok(percentile(during, 0.99) < HEALTH_P99_BOUND_MS, `/healthz p99 under ${HEALTH_P99_BOUND_MS} ms from another source (${latencies(during)})`)
    t.ok(figures.calm.during.length >= 20, `the calm tenant kept dispatching (${figures.calm.during.length} flows)`)
    t.same([...figures.calm.before, ...figures.calm.during].filter((flow) => !flow.ok).map((flow) => flow.problem), [], 'every calm dispatch was delivered and verified')
    t.ok((figures.attacker.get('200 rendered') ?? 0) > 0, 'the attacker\'s previews were rendered')
    t.ok((figures.attacker.get('429 RATE_LIMITED') ?? 0) > 0, 'and the rest refused with 429')
  })
}
