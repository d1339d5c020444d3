/*
 * The operators' monitoring, against the real tools (Debian's `prometheus` package): promtool
 * checks deploy/prometheus/rules.yaml and runs its unit tests, then a Prometheus server scrapes
 * a running service on Redis under traffic, and every panel query of
 * deploy/grafana/email-otp.json and every alert expression is evaluated through Prometheus's
 * HTTP API: a misspelled metric or a label the service does not export returns nothing.
 */
import { spawn, spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import GithubSlugger from 'github-slugger'
import MarkdownIt from 'markdown-it'
import t from 'tap'
import { parse } from 'yaml'
import { TEST_HMAC_KEYS, writeTenants } from '../helper.js'
import { startSmtp } from '../support/mail-peers.js'
import { killOnExit } from '../support/processes.js'
import { freePort, redisTestOptions, requireBinary, startRedis } from '../support/redis.js'
import { post, startServer } from '../support/service-process.js'
import { until } from '../support/wait.js'

const rulesPath = fileURLToPath(new URL('../../deploy/prometheus/rules.yaml', import.meta.url))
const rulesTestPath = fileURLToPath(new URL('../../deploy/prometheus/rules.test.yaml', import.meta.url))
const dashboardPath = fileURLToPath(new URL('../../deploy/grafana/email-otp.json', import.meta.url))
const operationsPath = fileURLToPath(new URL('../../docs/operations.md', import.meta.url))

const available = (binary: string): boolean => spawnSync(binary, ['--version'], { stdio: 'ignore' }).status === 0
const promtoolAvailable = available('promtool')
const prometheusAvailable = available('prometheus')

interface Rule { alert: string, expr: string, for?: string, labels?: Record<string, string>, annotations?: Record<string, string> }
const rules = (parse(readFileSync(rulesPath, 'utf8')) as { groups: Array<{ rules: Rule[] }> }).groups.flatMap((group) => group.rules)

interface Target { expr: string, legendFormat?: string }
interface Panel { id: number, type: string, title: string, datasource?: { uid?: string }, targets?: Target[], panels?: Panel[] }
interface Variable { name: string, type: string, query?: unknown, definition?: string, allValue?: string }
const dashboard = JSON.parse(readFileSync(dashboardPath, 'utf8')) as { schemaVersion: number, panels: Panel[], templating: { list: Variable[] } }
const panels = dashboard.panels.flatMap((panel) => [panel, ...(panel.panels ?? [])]).filter((panel) => panel.type !== 'row')

/**
 * A panel's query as Grafana sends it: the tenant variable at "All" (its allValue), the rate
 * interval a window that holds every sample the test's short run has.
 */
function expanded (expr: string): string {
  return expr.replaceAll('$tenant', '.*').replaceAll('$__rate_interval', '1m')
}

/** The labels a legend names (`{{tenant}} {{result}}`). */
function legendLabels (legend: string | undefined): string[] {
  return [...(legend ?? '').matchAll(/\{\{\s*(\w+)\s*\}\}/g)].map((match) => match[1] ?? '')
}

/** Every series selector of an expression (`name{matchers}`). */
function selectors (expr: string): string[] {
  return [...expr.matchAll(/\b(email_otp_\w+)(\{[^}]*\})?/g)].map((match) => match[0])
}

/**
 * Selectors whose series only a rare event makes (a 503 or a 500 from the service): the
 * metric itself must exist, which the traffic shows; the label value is not produced here.
 */
const RARE = new Set(['email_otp_errors_total{code=~"UNAVAILABLE|INTERNAL"}'])

t.test('the dashboard, as Grafana imports it: a data source variable, a tenant variable from label_values, every panel on the chosen data source', async (t) => {
  t.ok(dashboard.schemaVersion >= 39, `schemaVersion ${dashboard.schemaVersion}`)
  const variables = new Map(dashboard.templating.list.map((variable) => [variable.name, variable]))
  t.match(variables.get('datasource'), { type: 'datasource', query: 'prometheus' })
  t.match(variables.get('tenant'), { type: 'query', definition: 'label_values(email_otp_dispatches_total, tenant)', allValue: '.*' })
  t.equal(new Set(panels.map((panel) => panel.id)).size, panels.length, 'every panel has an id of its own')
  for (const panel of panels) {
    // eslint-disable-next-line no-template-curly-in-string -- Grafana's variable syntax, not a JavaScript template
    t.equal(panel.datasource?.uid, '${datasource}', `${panel.title}: on the chosen data source`)
    t.ok((panel.targets ?? []).length > 0, `${panel.title}: has a query`)
  }
})

t.test('every alert\'s runbook_url names its own paragraph of docs/operations.md', async (t) => {
  const tokens = new MarkdownIt().parse(readFileSync(operationsPath, 'utf8'), {})
  const slugger = new GithubSlugger()
  const anchors = new Set(tokens.flatMap((token, i) => token.type === 'heading_open' ? [slugger.slug(tokens[i + 1]?.content ?? '')] : []))
  for (const rule of rules) {
    t.equal(rule.annotations?.runbook_url, `docs/operations.md#${rule.alert.toLowerCase()}`, `${rule.alert}: its own paragraph`)
    t.ok(anchors.has(rule.alert.toLowerCase()), `${rule.alert}: docs/operations.md has it`)
  }
})

t.test('promtool: the rules are valid, and each alert fires on series that should fire it and no others', requireBinary('promtool', promtoolAvailable, 'the Prometheus rule checks', 'prometheus'), async (t) => {
  const checked = spawnSync('promtool', ['check', 'rules', rulesPath], { encoding: 'utf8' })
  t.equal(checked.status, 0, `promtool check rules${checked.status === 0 ? '' : `: ${checked.stdout}${checked.stderr}`}`)
  const tested = spawnSync('promtool', ['test', 'rules', rulesTestPath], { encoding: 'utf8' })
  t.equal(tested.status, 0, `promtool test rules${tested.status === 0 ? '' : `: ${tested.stdout}${tested.stderr}`}`)
  const testFile = readFileSync(rulesTestPath, 'utf8')
  for (const rule of rules) {
    t.ok(testFile.includes(`alertname: ${rule.alert}\n`), `${rule.alert} has a unit test`)
    t.match(rule, { labels: { severity: /^(warning|critical)$/ }, annotations: { summary: String, description: String, runbook_url: /^docs\/operations\.md#/ }, for: /^\d+[smh]$/ }, `${rule.alert}: severity, summary, description, runbook and a for`)
  }
})

const serverTestOptions = prometheusAvailable ? redisTestOptions() : requireBinary('prometheus', prometheusAvailable, 'the Prometheus server test', 'prometheus')

t.test('a Prometheus server scraping the service under traffic: every panel query returns data with its legend\'s labels, every alert expression evaluates', serverTestOptions, async (t) => {
  // A maxmemory, so that Redis reports how full it is.
  const redis = await startRedis(['--maxmemory', '256mb'])
  t.teardown(async () => { await redis.stop() })
  const smtp = await startSmtp(t)
  const { path, keys } = writeTenants(t, (file) => {
    // A tenant whose tier does not exist: refused alone, its keys answer 503.
    file.tenants.push({ id: 'initech', tier: 'no-such-tier', keys: [] })
  })
  const metricsPort = await freePort()
  // SES at a closed port: each live send fails over to SMTP until SES's circuit opens.
  const closedPort = await freePort()
  const server = await startServer(t, {
    TENANTS_FILE: path,
    OTP_HMAC_KEYS: TEST_HMAC_KEYS,
    REDIS_URL: redis.url,
    MAIL_TRANSPORT: 'ses,smtp',
    AWS_REGION: 'eu-west-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    AWS_ENDPOINT_URL_SESV2: `http://127.0.0.1:${closedPort}`,
    SMTP_URL: `smtp://127.0.0.1:${smtp.port}?tls=off`,
    MAIL_FROM: 'codes@otp.test',
    MAIL_BREAKER_FAILURES: '2',
    LOCKOUT_THRESHOLD: '3',
    METRICS_PORT: String(metricsPort)
  })
  await until('the service to be ready (Redis connected)', async () => (await fetch(`http://127.0.0.1:${metricsPort}/readyz`)).ok)

  const promPort = await freePort()
  const storage = t.testdir({})
  const config = join(storage, 'prometheus.yml')
  writeFileSync(config, [
    'global:',
    '  scrape_interval: 1s',
    '  evaluation_interval: 1s',
    'rule_files:',
    `  - ${JSON.stringify(rulesPath)}`,
    'scrape_configs:',
    '  - job_name: email-otp',
    '    static_configs:',
    `      - targets: ['127.0.0.1:${metricsPort}']`,
    ''
  ].join('\n'))
  const prometheus = killOnExit(spawn('prometheus', [
    `--config.file=${config}`,
    `--storage.tsdb.path=${join(storage, 'data')}`,
    `--web.listen-address=127.0.0.1:${promPort}`
  ], { stdio: ['ignore', 'ignore', 'pipe'] }))
  let prometheusLog = ''
  prometheus.stderr.on('data', (chunk: Buffer) => { prometheusLog += chunk.toString() })
  t.teardown(() => { prometheus.kill('SIGKILL') })
  const api = `http://127.0.0.1:${promPort}/api/v1`
  await until('Prometheus to be ready', async () => {
    if (prometheus.exitCode !== null) throw new Error(`prometheus exited: ${prometheusLog}`)
    return (await fetch(`http://127.0.0.1:${promPort}/-/ready`)).ok
  })
  type Series = { metric: Record<string, string> }
  const query = async (expr: string): Promise<{ status: string, error?: string, data?: { result: Series[] } }> =>
    await (await fetch(`${api}/query?${new URLSearchParams({ query: expr })}`)).json() as { status: string, error?: string, data?: { result: Series[] } }

  // Traffic: live dispatches (SES failing over to SMTP, then skipped), a right code, wrong
  // guesses up to a lockout, a malformed guess, a sandbox delivery failure, a wrong key, an
  // SNS message that is not one.
  const requestIds: string[] = []
  for (let i = 0; i < 4; i++) {
    const sent = await post(server.base, '/otp/request', keys.acmeLive, { email: `user${i}@example.com` })
    t.equal(sent.status, 200, `dispatch ${i}`)
    requestIds.push(sent.body.data.requestId)
  }
  const codeFor = (address: string): string => /\b(\d{6})\b/.exec(String(smtp.received.find((mail) => mail.text?.length !== undefined && mail.to !== undefined && JSON.stringify(mail.to).includes(address))?.text))?.[1] ?? ''
  t.equal((await post(server.base, '/otp/verify', keys.acmeLive, { requestId: requestIds[0], userGuess: codeFor('user0@example.com') })).status, 200, 'a right code')
  const wrong = String((Number(codeFor('user1@example.com')) + 1) % 1_000_000).padStart(6, '0')
  for (let i = 0; i < 3; i++) {
    t.equal((await post(server.base, '/otp/verify', keys.acmeLive, { requestId: requestIds[1], userGuess: wrong })).status, 400, `wrong guess ${i + 1}`)
  }
  t.equal((await post(server.base, '/otp/verify', keys.acmeLive, { requestId: requestIds[2], userGuess: 'abc' })).status, 400, 'a malformed guess')
  t.equal((await post(server.base, '/otp/request', keys.acmeTest, { email: 'fail@simulator.invalid' })).status, 502, 'a sandbox delivery failure')
  t.equal((await post(server.base, '/otp/request', 'sk_live_not-a-key', { email: 'user9@example.com' })).status, 401, 'a refusal')
  const sns = await fetch(`${server.base}/feedback/ses`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{}' })
  t.equal(sns.status, 400, 'an SNS message that is not one')

  const targets = panels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ panel: panel.title, expr: expanded(target.expr), labels: legendLabels(target.legendFormat) })))
  const answers = new Map<string, Awaited<ReturnType<typeof query>>>()
  // Until the scrapes after the traffic are in (rates need two samples). Past the stall guard
  // the last answers are judged below, one assertion per query: the failure names the panel.
  await until('every panel query to return data', async () => {
    for (const target of targets) answers.set(target.expr, await query(target.expr))
    return [...answers.values()].every((answer) => (answer.data?.result.length ?? 0) > 0)
  }).catch(() => {})
  for (const target of targets) {
    const answer = answers.get(target.expr)
    t.equal(answer?.status, 'success', `${target.panel}: ${target.expr} parses${answer?.error === undefined ? '' : `: ${answer.error}`}`)
    const result = answer?.data?.result ?? []
    t.ok(result.length > 0, `${target.panel}: ${target.expr} returns data`)
    for (const label of target.labels) {
      t.ok(result.length > 0 && result.every((series) => series.metric[label] !== undefined), `${target.panel}: every series has the legend's label ${label}`)
    }
  }

  const tenants = await (await fetch(`${api}/label/tenant/values?${new URLSearchParams({ 'match[]': 'email_otp_dispatches_total' })}`)).json() as { data: string[] }
  t.same(tenants.data, ['acme'], 'the tenant variable lists the tenants with traffic')

  const names = new Set((await (await fetch(`${api}/label/__name__/values`)).json() as { data: string[] }).data)
  for (const rule of rules) {
    const answer = await query(rule.expr)
    t.equal(answer.status, 'success', `${rule.alert}: its expression evaluates${answer.error === undefined ? '' : `: ${answer.error}`}`)
    for (const selector of selectors(rule.expr)) {
      if (RARE.has(selector)) {
        t.ok(names.has(selector.replace(/\{.*$/, '')), `${rule.alert}: ${selector}: the metric exists (its label value needs a rare event)`)
        continue
      }
      t.ok(((await query(selector)).data?.result.length ?? 0) > 0, `${rule.alert}: ${selector} has series`)
    }
  }
  const loaded = await (await fetch(`${api}/rules`)).json() as { data: { groups: Array<{ rules: Array<{ name: string, health: string, lastError?: string }> }> } }
  const health = loaded.data.groups.flatMap((group) => group.rules)
  t.same(health.map((rule) => rule.name).sort(), rules.map((rule) => rule.alert).sort(), 'Prometheus loaded every alert of rules.yaml')
  t.same(health.filter((rule) => rule.health === 'err').map((rule) => `${rule.name}: ${rule.lastError ?? ''}`), [], 'and none fails to evaluate')
})
