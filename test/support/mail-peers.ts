import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer as createTcpServer, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { SMTPServer, type SMTPServerOptions } from 'smtp-server'
import { simpleParser, type ParsedMail } from 'mailparser'
import { DeliveryError } from '../../lib/mail/transport.js'
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
export async function deliveryFailure (fn: () => Promise<void>): Promise<{ error: DeliveryError, elapsed: number }> {
  const started = performance.now()
  try {
    await fn()
  } catch (error) {
    if (error instanceof DeliveryError) return { error, elapsed: performance.now() - started }
    throw error
  }
  throw new Error('expected a DeliveryError')
}
