/*
 * One tenant previewing its costliest accepted template as fast as the service lets it, from
 * one source with several keys, while another source polls /healthz and a calm tenant
 * dispatches and verifies codes from a third: the scenario of test/abuse/template-preview.abuse.ts
 * and of its short version in npm test (test/server/template-previews.test.ts).
 */
import { Agent } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { writeTenants } from '../helper.js'
import { send, type RawAnswer } from './http.js'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import { DATE_FORMAT_LIMIT, MEMORY_LIMIT } from '../../lib/mail/templating/liquid-bounds.js'
import { SOURCE_LIMITS, type Part } from '../../lib/mail/templating/liquid.js'

export const ATTACKER = '127.0.0.5'
export const PROBE = '127.0.0.6'
export const CALM = '127.0.0.7'
/** The lifetime a preview asks for: the branch the load's test renders (1, 10 minutes) never take. */
export const ATTACK_MINUTES = 7

/**
 * The costliest template the load accepts, part by part. Its test renders (1 and 10 minutes)
 * take no time; a preview of ATTACK_MINUTES spends, one costly step at a time (a `date` of the
 * longest format, all month and day names, the slowest directives), about half the render
 * budget in the subject and in the text, which then succeed, and runs the HTML part to its
 * budget, which then fails far into a source as long as the part allows (LiquidJS's error
 * message scans the whole source). A message falls back to the built-in wording at its first
 * failing part, so this is the most three parts can cost in one preview.
 */
export function costliestPart (part: Part): string {
  const format = '%A%B'.repeat(DATE_FORMAT_LIMIT / 4)
  // Two nested loops: as many steps as the memory limit leaves ranges for.
  const side = Math.floor(Math.sqrt(MEMORY_LIMIT - 1000))
  const steps = part === 'html' ? `{% for i in (1..${side}) %}{% for j in (1..${side}) %}{% assign d = requestedAt | date: "${format}" %}{% endfor %}{% endfor %}` : `{% for i in (1..2) %}{% assign d = requestedAt | date: "${format}" %}{% endfor %}`
  const attack = `{% if minutes == ${ATTACK_MINUTES} %}${steps}{% endif %}`
  const tail = part === 'subject' ? 'Sign in to {{ brand }}' : 'Your code: {{ code }}'
  const filler = '.\n'.repeat(Math.floor((SOURCE_LIMITS[part] - attack.length - tail.length - 64) / 2))
  return `${part === 'html' ? `<!--${filler}-->` : part === 'text' ? filler : ''}${attack}${tail}`
}

export interface AttackDeployment {
  path: string
  /** The attacking tenant's secret keys (acme). */
  attackerKeys: string[]
  /** The calm tenant's sandbox secret key (globex). */
  calmKey: string
}

/** acme with the costliest template in every part and `keys` secret keys; globex calm, with the built-in wording. */
export function attackDeployment (t: Test, keys: number): AttackDeployment {
  const attackerKeys = Array.from({ length: keys }, () => generateKey('secret', 'live'))
  const { path, keys: fixture } = writeTenants(t, (file) => {
    // The calm tenant's flows must never meet its allowance.
    file.tiers.standard = { allowance: 1_000_000, window: '1d', sandboxAllowance: 1_000_000 }
    const acme = file.tenants[0]!
    acme.templates = { en: { subject: costliestPart('subject'), text: costliestPart('text'), html: costliestPart('html') } }
    acme.keys.push(...attackerKeys.map((key, index) => ({ id: `attacker_${index}`, kind: 'secret' as const, mode: 'live' as const, sha256: hashKey(key) })))
  })
  return { path, attackerKeys, calmKey: fixture.globexTest }
}

/** A JSON request over a kept-alive connection from `agent`'s source address. */
async function call (agent: Agent, port: number, method: string, path: string, key?: string, body?: unknown): Promise<RawAnswer> {
  return await send({
    port,
    agent,
    method,
    path,
    timeoutMs: 30_000,
    headers: {
      ...(key === undefined ? {} : { authorization: `Bearer ${key}` }),
      ...(body === undefined ? {} : { 'content-type': 'application/json' })
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
}

export function agentFrom (t: Test, localAddress: string): Agent {
  const agent = new Agent({ keepAlive: true, localAddress, maxSockets: 256 })
  t.teardown(() => { agent.destroy() })
  return agent
}

/** How long the attacker waits after a refusal before it asks again, whatever Retry-After says. */
export const ATTACKER_RETRY_MS = 10

/**
 * The attacker: `loops` clients spread over its keys, each asking for the next preview at once
 * after an answer and ATTACKER_RETRY_MS after a refusal, so that it gets every preview the
 * service lets through the moment it may. (A client asking faster than that only adds refusals,
 * which every route costs and no template bound is about.)
 */
export async function previewFlood (agent: Agent, port: number, keys: string[], loops: number, running: () => boolean): Promise<Map<string, number>> {
  const answers = new Map<string, number>()
  await Promise.all(Array.from({ length: loops }, async (_, index) => {
    const key = keys[index % keys.length] ?? ''
    while (running()) {
      const answer = await call(agent, port, 'POST', '/templates/preview', key, { locale: 'en', minutes: ATTACK_MINUTES })
      const label = `${answer.status} ${String(answer.body?.code ?? (answer.status === 200 ? 'rendered' : ''))}`
      answers.set(label, (answers.get(label) ?? 0) + 1)
      if (answer.status === 429) await sleep(ATTACKER_RETRY_MS)
    }
  }))
  return answers
}

/** Another source: GET /healthz back to back, each answer's latency in ms. */
export async function pollHealth (agent: Agent, port: number, running: () => boolean): Promise<Array<{ status: number, ms: number }>> {
  const results: Array<{ status: number, ms: number }> = []
  while (running()) {
    const started = performance.now()
    const answer = await call(agent, port, 'GET', '/healthz')
    results.push({ status: answer.status, ms: performance.now() - started })
    await sleep(5)
  }
  return results
}

/** The calm tenant: dispatch, read the code from the sandbox inbox, verify; each flow's latency and outcome. */
export async function calmFlows (agent: Agent, port: number, key: string, running: () => boolean): Promise<Array<{ ok: boolean, ms: number, problem: string }>> {
  const results: Array<{ ok: boolean, ms: number, problem: string }> = []
  for (let round = 0; running(); round++) {
    const email = `calm${round}-${Math.random().toString(36).slice(2, 8)}@example.com`
    const started = performance.now()
    const sent = await call(agent, port, 'POST', '/otp/request', key, { email })
    const inbox = sent.status === 200 ? await call(agent, port, 'GET', `/sandbox/messages?email=${encodeURIComponent(email)}`, key) : null
    const code = inbox?.body?.data?.messages?.[0]?.code as string | undefined
    const verified = code === undefined ? null : await call(agent, port, 'POST', '/otp/verify', key, { requestId: sent.body.data.requestId, userGuess: code })
    const ok = verified?.status === 200
    results.push({ ok, ms: performance.now() - started, problem: ok ? '' : `dispatch ${sent.status}, inbox ${inbox?.status ?? '-'}, verify ${verified?.status ?? '-'}` })
    await sleep(20)
  }
  return results
}

export function percentile (values: number[], fraction: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? Number.NaN
}

export function latencies (values: number[]): string {
  return `n=${values.length} p50 ${percentile(values, 0.5).toFixed(1)} ms, p99 ${percentile(values, 0.99).toFixed(1)} ms, max ${Math.max(...values).toFixed(1)} ms`
}

export interface AttackFigures {
  health: { before: Array<{ status: number, ms: number }>, during: Array<{ status: number, ms: number }> }
  calm: { before: Array<{ ok: boolean, ms: number, problem: string }>, during: Array<{ ok: boolean, ms: number, problem: string }> }
  /** The attacker's answers, `status code` → count. */
  attacker: Map<string, number>
}

/** `baselineMs` of probes alone, then `attackMs` of probes under the flood of `loops` previews in flight. */
export async function runAttack (t: Test, port: number, deployment: AttackDeployment, options: { baselineMs: number, attackMs: number, loops: number }): Promise<AttackFigures> {
  const probe = agentFrom(t, PROBE)
  const calm = agentFrom(t, CALM)
  const attacker = agentFrom(t, ATTACKER)
  let deadline = Date.now() + options.baselineMs
  const [healthBefore, calmBefore] = await Promise.all([
    pollHealth(probe, port, () => Date.now() < deadline),
    calmFlows(calm, port, deployment.calmKey, () => Date.now() < deadline)
  ])
  let flooding = true
  const flood = previewFlood(attacker, port, deployment.attackerKeys, options.loops, () => flooding)
  // The probes start once the flood is under way.
  await sleep(200)
  deadline = Date.now() + options.attackMs
  const [healthDuring, calmDuring] = await Promise.all([
    pollHealth(probe, port, () => Date.now() < deadline),
    calmFlows(calm, port, deployment.calmKey, () => Date.now() < deadline)
  ])
  flooding = false
  return { health: { before: healthBefore, during: healthDuring }, calm: { before: calmBefore, during: calmDuring }, attacker: await flood }
}

/** The figures, one line each, as docs/security.md quotes them. */
export function report (figures: AttackFigures): string[] {
  const attacker = [...figures.attacker].sort(([a], [b]) => a.localeCompare(b)).map(([answer, count]) => `${count} × ${answer}`).join(', ')
  return [
    `/healthz before: ${latencies(figures.health.before.map((result) => result.ms))}`,
    `/healthz during: ${latencies(figures.health.during.map((result) => result.ms))}`,
    `calm tenant's dispatch + inbox + verify before: ${latencies(figures.calm.before.map((result) => result.ms))}`,
    `calm tenant's dispatch + inbox + verify during: ${latencies(figures.calm.during.map((result) => result.ms))}`,
    `attacker's previews: ${attacker}`
  ]
}
