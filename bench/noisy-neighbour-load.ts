/*
 * The load generators of bench/noisy-neighbour.ts, each in a worker thread of its own so
 * that neither the calm tenant's clock nor the flood's pace depends on the benchmark's main
 * event loop (or on each other's): the calm tenant's paced flows, and one flood per surface.
 */
import { randomBytes } from 'node:crypto'
import { Agent, request } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { parentPort, workerData } from 'node:worker_threads'

/** What the flood of one surface sends: see floodRequest. */
export type Surface = 'dispatch' | 'public-dispatch' | 'junk-verifies' | 'previews' | 'webhooks'
export const SURFACES: readonly Surface[] = ['dispatch', 'public-dispatch', 'junk-verifies', 'previews', 'webhooks']

export interface CalmJob {
  role: 'calm'
  port: number
  key: string
  source: string
  /** Flows started per second, on a fixed schedule whatever the answers take. */
  rate: number
  /**
   * One schedule over these phases, back to back on the same connections: a flow belongs to
   * the phase its scheduled start falls in. The worker posts `{ phase }` as each phase's
   * schedule begins, then `{ results }`, one per phase, once every flow has its answer.
   */
  phases: Array<{ name: string, seconds: number }>
  /** An answer later than this fails its flow. */
  timeoutMs: number
}

export interface CalmResult {
  /** Each flow's time from its scheduled start to its verify's answer (ms), successful flows only. */
  latencies: number[]
  /** Each successful flow's scheduled start, ms after the phase's first (the same order as `latencies`). */
  scheduledAt: number[]
  flows: number
  succeeded: number
  /** The first few failures, as `dispatch 200, inbox 200, verify 503`. */
  problems: Record<string, number>
  /** From the phase's first scheduled start to its last answer. */
  seconds: number
}

export type CalmMessage = { phase: string } | { results: Record<string, CalmResult> }

export interface FloodJob {
  role: 'flood'
  surface: Surface
  port: number
  /** Loopback addresses the flood's connections come from, in turn. */
  sources: string[]
  /** Requests in flight at once (one per loop). */
  loops: number
  secretKeys: string[]
  testKeys: string[]
  publicKeys: string[]
  origin: string
  /** The preview's lifetime that takes the costly branch of the noisy tenant's template. */
  previewMinutes: number
}

export interface FloodResult {
  surface: Surface
  requests: number
  seconds: number
  /** Answers by `status code`: the body's error code, `ok`, or `no answer` for status 0. */
  statuses: Record<string, number>
}

interface Answer { status: number, body: any }

function call (agent: Agent, port: number, method: string, path: string, headers: Record<string, string>, body: unknown, timeoutMs: number): Promise<Answer> {
  return new Promise((resolve) => {
    const payload = body === undefined ? undefined : JSON.stringify(body)
    const outgoing = request({
      host: '127.0.0.1',
      port,
      method,
      path,
      agent,
      headers: {
        ...headers,
        ...(payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) })
      }
    }, (response) => {
      let text = ''
      response.setEncoding('utf8')
      response.on('data', (chunk: string) => { text += chunk })
      response.on('end', () => {
        let parsed: unknown = null
        try { parsed = JSON.parse(text) } catch { /* not JSON */ }
        resolve({ status: response.statusCode ?? 0, body: parsed })
      })
      response.on('error', () => { resolve({ status: 0, body: null }) })
    })
    outgoing.setTimeout(timeoutMs, () => { outgoing.destroy(new Error('timeout')) })
    // A connection error or a timeout is status 0: counted, never thrown.
    outgoing.on('error', () => { resolve({ status: 0, body: null }) })
    outgoing.end(payload)
  })
}

/** The calm tenant's flows: dispatch, the code from its sandbox inbox, verify; `rate` a second through every phase. */
async function calm (job: CalmJob, post: (message: CalmMessage) => void): Promise<void> {
  const agent = new Agent({ keepAlive: true, localAddress: job.source, maxSockets: 512 })
  const auth = { authorization: `Bearer ${job.key}` }
  const tag = randomBytes(4).toString('hex')
  const interval = 1000 / job.rate
  const phases = job.phases.map((phase) => ({
    ...phase,
    firstFlow: 0,
    firstStart: 0,
    lastAnswer: 0,
    result: { latencies: [], scheduledAt: [], flows: Math.round(job.rate * phase.seconds), succeeded: 0, problems: {}, seconds: 0 } as CalmResult
  }))

  async function flow (index: number, scheduled: number, phase: typeof phases[number]): Promise<void> {
    const email = `calm-${tag}-${index}@example.com`
    const sent = await call(agent, job.port, 'POST', '/otp/request', auth, { email }, job.timeoutMs)
    const inbox = sent.status === 200 ? await call(agent, job.port, 'GET', `/sandbox/messages?email=${encodeURIComponent(email)}`, auth, undefined, job.timeoutMs) : null
    const code = inbox?.body?.data?.messages?.[0]?.code as string | undefined
    const verified = code === undefined ? null : await call(agent, job.port, 'POST', '/otp/verify', auth, { requestId: sent.body.data.requestId, userGuess: code }, job.timeoutMs)
    const answered = performance.now()
    phase.lastAnswer = Math.max(phase.lastAnswer, answered)
    const { result } = phase
    if (verified?.status === 200) {
      result.succeeded++
      result.latencies.push(answered - scheduled)
      result.scheduledAt.push(scheduled - phase.firstStart)
    } else {
      const problem = `dispatch ${sent.status}, inbox ${inbox?.status ?? '-'}${code === undefined && inbox !== null ? ' (no code)' : ''}, verify ${verified?.status ?? '-'}`
      result.problems[problem] = (result.problems[problem] ?? 0) + 1
    }
  }

  const started = performance.now()
  const flows: Array<Promise<void>> = []
  for (const phase of phases) {
    phase.firstFlow = flows.length
    phase.firstStart = started + flows.length * interval
    post({ phase: phase.name })
    const end = phase.firstFlow + phase.result.flows
    while (flows.length < end) {
      const now = performance.now()
      // Every flow that is due starts now, at its scheduled time: a stalled moment is measured, not skipped.
      while (flows.length < end && started + flows.length * interval <= now) {
        const scheduled = started + flows.length * interval
        flows.push(flow(flows.length, scheduled, phase))
      }
      if (flows.length < end) await sleep(1)
    }
  }
  await Promise.all(flows)
  agent.destroy()
  for (const phase of phases) phase.result.seconds = (phase.lastAnswer - phase.firstStart) / 1000
  post({ results: Object.fromEntries(phases.map((phase) => [phase.name, phase.result])) })
}

const junkId = (): string => `otp_${randomBytes(16).toString('base64url').slice(0, 22)}`

/**
 * One flood: `loops` requests in flight, each loop sending its next as soon as the last one
 * is answered (after a refusal too: a flood of 429s is part of the load), until `stopping()`.
 */
async function flood (job: FloodJob, stopping: () => boolean): Promise<FloodResult> {
  const agents = job.sources.map((localAddress) => new Agent({ keepAlive: true, localAddress, maxSockets: 64 }))
  const statuses: Record<string, number> = {}
  let requests = 0
  let sequence = 0
  const count = (answer: Answer): void => {
    requests++
    const label = `${answer.status} ${String(answer.body?.code ?? (answer.status === 0 ? 'no answer' : 'ok'))}`
    statuses[label] = (statuses[label] ?? 0) + 1
  }
  // Fresh end users and recipients: 11.x.y.z, flood-<run>-<n>@example.net.
  const run = randomBytes(3).toString('hex')
  const endUser = (n: number): string => `11.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`
  const page = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}`, origin: job.origin })
  const backend = (key: string, n: number): Record<string, string> => ({ authorization: `Bearer ${key}`, 'end-user-ip': endUser(n) })

  async function loop (index: number): Promise<void> {
    const agent = agents[index % agents.length] as Agent
    const pick = (keys: string[]): string => keys[(sequence + index) % keys.length] as string
    while (!stopping()) {
      const n = ++sequence
      switch (job.surface) {
        case 'dispatch': {
          count((await call(agent, job.port, 'POST', '/otp/request', backend(pick(job.secretKeys), n), { email: `flood-${run}-${n}@example.net` }, 30_000)))
          break
        }
        case 'public-dispatch': {
          count((await call(agent, job.port, 'POST', '/otp/request', page(pick(job.publicKeys)), { email: `page-${run}-${n}@example.net` }, 30_000)))
          break
        }
        case 'junk-verifies': {
          // Made-up requestIds through the public keys (as a stranger) and the secret ones (as its backend).
          const headers = n % 2 === 0 ? page(pick(job.publicKeys)) : backend(pick(job.secretKeys), n)
          count((await call(agent, job.port, 'POST', '/otp/verify', headers, { requestId: junkId(), userGuess: '000000' }, 30_000)))
          break
        }
        case 'previews': {
          const answer = await call(agent, job.port, 'POST', '/templates/preview', { authorization: `Bearer ${pick(job.secretKeys)}` }, { locale: 'en', minutes: job.previewMinutes }, 30_000)
          count(answer)
          // As test/support/preview-attack.ts: asking faster after a refusal only adds refusals.
          if (answer.status === 429) await sleep(10)
          break
        }
        case 'webhooks': {
          // A sandbox code and one wrong guess: a verification.failed event for each of the noisy tenant's hanging endpoints.
          const key = pick(job.testKeys)
          const sent = await call(agent, job.port, 'POST', '/otp/request', backend(key, n), { email: `hook-${run}-${n}@example.net` }, 30_000)
          count(sent)
          const requestId = sent.body?.data?.requestId as string | undefined
          if (requestId !== undefined && !stopping()) {
            count((await call(agent, job.port, 'POST', '/otp/verify', backend(key, n), { requestId, userGuess: '000000' }, 30_000)))
          }
          break
        }
      }
    }
  }

  const started = performance.now()
  await Promise.all(Array.from({ length: job.loops }, async (_, index) => { await loop(index) }))
  const seconds = (performance.now() - started) / 1000
  for (const agent of agents) agent.destroy()
  return { surface: job.surface, requests, seconds, statuses }
}

if (parentPort !== null) {
  const port = parentPort
  const job = workerData as CalmJob | FloodJob
  if (job.role === 'calm') {
    await calm(job, (message) => { port.postMessage(message) })
  } else {
    // Loaded before the flood starts, so that starting this thread is not part of it: 'go', then 'stop'.
    await new Promise((resolve) => port.once('message', resolve))
    let stop = false
    port.once('message', () => { stop = true })
    port.postMessage(await flood(job, () => stop))
  }
  port.close()
}
