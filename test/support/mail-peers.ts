import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer as createHttpServer, request as httpRequest } from 'node:http'
import { createServer as createTcpServer, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { SMTPServer, type SMTPServerOptions } from 'smtp-server'
import { simpleParser, type ParsedMail } from 'mailparser'
import { DeliveryError } from '../../lib/mail/delivery/transport.js'
import { killOnExit } from './processes.js'
import { freePort } from './redis.js'

const CLI = fileURLToPath(new URL('../../node_modules/aws-ses-v2-local/dist/cli.js', import.meta.url))

/** A message as aws-ses-v2-local's GET /store reports it. */
export interface StoredEmail {
  from: string
  replyTo: string[]
  destination: { to: string[] }
  subject: string
  body: { text?: string, html?: string }
}

export async function sesStore (base: string): Promise<StoredEmail[]> {
  const response = await fetch(`${base}/store`)
  return ((await response.json()) as { emails: StoredEmail[] }).emails
}

/** Starts aws-ses-v2-local on a free loopback port and waits until it answers HTTP. */
export async function startSesLocal (t: Test): Promise<string> {
  return (await startSesProcess(t)).base
}

/** aws-ses-v2-local, and a way to kill it mid-test (an SES outage). */
export async function startSesProcess (t: Test): Promise<{ base: string, kill: () => Promise<void> }> {
  const port = await freePort()
  const child = killOnExit(spawn(process.execPath, [CLI, '--host', '127.0.0.1', '--port', String(port)], {
    stdio: ['ignore', 'ignore', 'pipe']
  }))
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const kill = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return
    const exited = once(child, 'exit')
    child.kill('SIGKILL')
    await exited
  }
  t.teardown(kill)
  const base = `http://127.0.0.1:${port}`
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null) throw new Error(`aws-ses-v2-local exited: ${stderr}`)
    try {
      const response = await fetch(`${base}/health-check`)
      if (response.ok) return { base, kill }
    } catch {
      // not listening yet
    }
    await sleep(50)
  }
  throw new Error(`aws-ses-v2-local did not start on ${port}: ${stderr}`)
}

/** A request as the SES proxy saw it: which operation, to whom. */
export interface ProxiedRequest {
  bulk: boolean
  /** Each destination's first To address, in the request's order. */
  to: string[]
}

/** What a bulk request's answer holds per destination. */
interface BulkAnswer { BulkEmailEntryResults?: Array<{ Status?: string, MessageId?: string }> }

export interface SesProxy {
  endpoint: string
  /** Every request, in arrival order. */
  requests: ProxiedRequest[]
  /** Requests for which `match` holds wait, unanswered, until release(). */
  hold: (match: (request: ProxiedRequest) => boolean) => void
  release: () => void
  /**
   * Destinations SES refuses: their entry of a SendBulkEmail answer says MESSAGE_REJECTED and a
   * SendEmail to them is answered MessageRejected, as SES answers a message it refuses.
   */
  refuse: Set<string>
  /** When set, every SendBulkEmail is answered with this SES error (its HTTP status and type) instead. */
  failBulk: { status: number, type: string } | null
}

/**
 * An HTTP proxy in front of aws-ses-v2-local that records each SES v2 send, can hold requests
 * (a call in flight for as long as a test needs) and answers for SES what the emulator cannot
 * produce: the emulator refuses no address the service accepts, and never fails.
 */
export async function startSesProxy (t: Test, target: string): Promise<SesProxy> {
  const upstream = new URL(target)
  let held: ((request: ProxiedRequest) => boolean) | null = null
  const waiting: Array<() => void> = []
  const proxy: SesProxy = {
    endpoint: '',
    requests: [],
    hold (match) { held = match },
    release () {
      held = null
      for (const go of waiting.splice(0)) go()
    },
    refuse: new Set(),
    failBulk: null
  }
  const server = createHttpServer((incoming, outgoing) => {
    const chunks: Buffer[] = []
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk))
    incoming.on('end', () => {
      const raw = Buffer.concat(chunks)
      const body = JSON.parse(raw.toString()) as { Destination?: { ToAddresses?: string[] }, BulkEmailEntries?: Array<{ Destination: { ToAddresses: string[] } }> }
      const bulk = incoming.url === '/v2/email/outbound-bulk-emails'
      const request: ProxiedRequest = {
        bulk,
        to: bulk ? (body.BulkEmailEntries ?? []).map((entry) => entry.Destination.ToAddresses[0] ?? '') : [body.Destination?.ToAddresses?.[0] ?? '']
      }
      proxy.requests.push(request)
      const answer = (status: number, headers: Record<string, string>, payload: unknown): void => {
        if (outgoing.destroyed) return
        outgoing.writeHead(status, { 'content-type': 'application/json', ...headers })
        outgoing.end(JSON.stringify(payload))
      }
      const forward = (): void => {
        if (bulk && proxy.failBulk !== null) {
          answer(proxy.failBulk.status, { 'x-amzn-errortype': proxy.failBulk.type, 'x-amzn-requestid': 'req-bulk' }, { message: 'failed' })
          return
        }
        if (!bulk && proxy.refuse.has(request.to[0] ?? '')) {
          answer(400, { 'x-amzn-errortype': 'MessageRejected', 'x-amzn-requestid': 'req-refused' }, { message: 'refused' })
          return
        }
        const onward = httpRequest({ host: upstream.hostname, port: upstream.port, method: incoming.method, path: incoming.url, headers: incoming.headers }, (response) => {
          const parts: Buffer[] = []
          response.on('data', (chunk: Buffer) => parts.push(chunk))
          response.on('end', () => {
            let text = Buffer.concat(parts).toString()
            if (bulk && response.statusCode === 200) {
              const parsed = JSON.parse(text) as BulkAnswer
              for (const [index, result] of (parsed.BulkEmailEntryResults ?? []).entries()) {
                if (proxy.refuse.has(request.to[index] ?? '')) result.Status = 'MESSAGE_REJECTED'
              }
              text = JSON.stringify(parsed)
            }
            // The emulator's own headers, but the length, which the rewrite may change.
            const headers = Object.fromEntries(Object.entries(response.headers).filter((entry): entry is [string, string] =>
              typeof entry[1] === 'string' && !['content-length', 'transfer-encoding', 'connection'].includes(entry[0])))
            answer(response.statusCode ?? 502, headers, JSON.parse(text))
          })
        })
        onward.on('error', () => { outgoing.destroy() })
        onward.end(raw)
      }
      if (held?.(request) === true) waiting.push(forward)
      else forward()
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    proxy.release()
    server.closeAllConnections()
    server.close()
    await once(server, 'close')
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  proxy.endpoint = `http://127.0.0.1:${address.port}`
  return proxy
}

export interface SmtpPeer {
  port: number
  /** Parsed messages, in arrival order. */
  received: ParsedMail[]
  /** Number of SMTP connections the server accepted. */
  connections: () => number
}

/**
 * Starts a real SMTP server on a free loopback port, without STARTTLS, capturing every
 * message. `options` override the defaults (authentication, RCPT handling …).
 */
export async function startSmtp (t: Test, options: Partial<SMTPServerOptions> = {}): Promise<SmtpPeer> {
  const received: ParsedMail[] = []
  let connections = 0
  const server = new SMTPServer({
    secure: false,
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    closeTimeout: 1000,
    onConnect (_session, callback) {
      connections++
      callback()
    },
    onData (stream, _session, callback) {
      simpleParser(stream).then((mail) => {
        received.push(mail)
        callback()
      }, callback)
    },
    ...options
  })
  const port = await freePort()
  server.listen(port, '127.0.0.1')
  await once(server.server, 'listening')
  t.teardown(() => new Promise<void>((resolve) => { server.close(() => resolve()) }))
  return { port, received, connections: () => connections }
}

/**
 * A raw TCP peer on a free loopback port: `onConnection` decides what it says, if anything.
 * Every socket is destroyed when the test ends.
 */
export async function startTcpPeer (t: Test, onConnection: (socket: Socket) => void = () => {}): Promise<number> {
  const sockets = new Set<Socket>()
  const server = createTcpServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => {})
    socket.on('close', () => sockets.delete(socket))
    onConnection(socket)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy()
    server.close()
    await once(server, 'close')
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  return address.port
}

/** A TCP peer that accepts connections and never says a word. */
export async function startSilentPeer (t: Test): Promise<number> {
  return await startTcpPeer(t)
}

/** Runs fn and returns the DeliveryError it rejects with, and how long that took. */
export async function deliveryFailure (fn: () => Promise<unknown>): Promise<{ error: DeliveryError, elapsed: number }> {
  const started = performance.now()
  try {
    await fn()
  } catch (error) {
    if (error instanceof DeliveryError) return { error, elapsed: performance.now() - started }
    throw error
  }
  throw new Error('expected a DeliveryError')
}
