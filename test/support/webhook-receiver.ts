import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import { createServer as createNetServer, type Socket } from 'node:net'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { Webhook } from 'standardwebhooks'

export interface ReceivedWebhook {
  id: string
  timestamp: number
  /** The body as verified by the Standard Webhooks reference library. */
  payload: any
  headers: IncomingHttpHeaders
  /** What the receiver answered (or was about to, when the sender gave up first). */
  status: number
  /** When the request arrived, epoch ms. */
  receivedAtMs: number
}

/** What the receiver does with the n-th request (0-based): answer a status, after a delay. */
export type Behaviour = (attempt: number) => { status: number, delayMs?: number }

export interface WebhookReceiver {
  url: string
  /** Requests whose signature verified, in arrival order (answered or not). */
  readonly verified: ReceivedWebhook[]
  /** Requests whose signature did not verify (answered 400). */
  readonly rejected: number
  /** Every request, verified or not. */
  readonly attempts: number
  behave (behaviour: Behaviour): void
  /** Waits until `check` holds, polling; fails the wait after `timeoutMs`. */
  waitFor (check: () => boolean, what: string, timeoutMs?: number): Promise<void>
}

/**
 * A partner's webhook endpoint on loopback: it checks each request's signature with the
 * Standard Webhooks reference library (`secret` is the endpoint's whsec_…), and answers as
 * told: 2xx, an error status, or late.
 */
export async function startReceiver (t: Test, secret: string, behaviour: Behaviour = () => ({ status: 204 })): Promise<WebhookReceiver> {
  const verifier = new Webhook(secret)
  const verified: ReceivedWebhook[] = []
  let rejected = 0
  let attempts = 0
  let behave = behaviour
  const pending = new Map<ServerResponse, NodeJS.Timeout>()
  const server = createServer((request, response) => {
    const receivedAtMs = Date.now()
    const attempt = attempts++
    let body = ''
    request.on('data', (chunk: Buffer) => { body += chunk.toString() })
    request.on('end', () => {
      let payload: unknown
      try {
        payload = verifier.verify(body, request.headers as Record<string, string>)
      } catch {
        rejected++
        response.writeHead(400).end()
        return
      }
      const { status, delayMs = 0 } = behave(attempt)
      verified.push({ id: String(request.headers['webhook-id']), timestamp: Number(request.headers['webhook-timestamp']), payload, headers: request.headers, status, receivedAtMs })
      const answer = setTimeout(() => {
        pending.delete(response)
        if (!response.destroyed) response.writeHead(status).end()
      }, delayMs)
      pending.set(response, answer)
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    // A slow answer's timer would keep the test's process alive for its whole delay.
    for (const [response, answer] of pending) {
      clearTimeout(answer)
      response.destroy()
    }
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return {
    url: `http://127.0.0.1:${address.port}/hooks/otp`,
    verified,
    get rejected () { return rejected },
    get attempts () { return attempts },
    behave (next) { behave = next },
    async waitFor (check, what, timeoutMs = 30_000) {
      const started = Date.now()
      while (!check()) {
        if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}: ${attempts} attempts, ${JSON.stringify(verified.map((entry) => entry.payload?.type))}`)
        await sleep(25)
      }
    }
  }
}

/** A Standard Webhooks secret: whsec_ and 32 random bytes in base64. */
export function webhookSecret (): string {
  return `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`
}

export interface HangingEndpoints {
  /** One URL per endpoint, all on one server. */
  urls: string[]
  /** Connections open now, and the most ever open at once. */
  readonly open: number
  readonly peak: number
  /** Connections accepted so far. */
  readonly accepted: number
}

/**
 * Endpoints that accept the connection, read the request and never answer: what a partner's
 * endpoint that hangs looks like to the sender. Connections are closed when the test ends.
 */
export async function startHangingEndpoints (t: Test, count: number): Promise<HangingEndpoints> {
  const sockets = new Set<Socket>()
  let peak = 0
  let accepted = 0
  const server = createNetServer((socket) => {
    accepted++
    sockets.add(socket)
    peak = Math.max(peak, sockets.size)
    socket.on('data', () => {})
    socket.on('error', () => {})
    socket.on('close', () => { sockets.delete(socket) })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy()
    await new Promise((resolve) => server.close(resolve))
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return {
    urls: Array.from({ length: count }, (_, index) => `http://127.0.0.1:${address.port}/hang/${index}`),
    get open () { return sockets.size },
    get peak () { return peak },
    get accepted () { return accepted }
  }
}
