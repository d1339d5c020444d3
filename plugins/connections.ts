import { randomUUID } from 'node:crypto'
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import fp from 'fastify-plugin'
import { errorCatalog } from '../schemas/error-catalog.js'
import { sourceBucket } from '../lib/net/source-address.js'
import type { IpRangeSet } from '../lib/net/ip-ranges.js'
import { apiError } from '../lib/errors.js'

export interface ConnectionsOptions {
  /** Open connections one source may hold (MAX_CONNECTIONS_PER_SOURCE); 0 for no limit. */
  maxPerSource: number
  /** Proxies in front (TRUST_PROXY): every client arrives through them, so they have no limit. */
  trustedProxies: IpRangeSet | null
  /** IPv6 peers share a limit per prefix of this length, as they share a velocity bucket. */
  ipv6BucketPrefix: number
  /**
   * How long an answer the app has finished may take to be written out (REQUEST_TIMEOUT_MS:
   * a client gets as long to take an answer as to send a request); then the connection is
   * destroyed. 0 for no bound.
   */
  writeStallMs: number
}

/**
 * Requests that may wait on one connection behind the one it is serving; one more and the
 * connection is closed. Browsers and the usual HTTP clients never pipeline; a client that does
 * rarely sends more than a few ahead.
 */
export const PIPELINED_PER_CONNECTION = 16

/**
 * Body bytes that may wait on one connection behind the request it is serving. A waiting
 * request is not read, so its body sits in the kernel's socket buffers, which grow with it: 16
 * waiting 256 KiB bodies on each of 128 connections held about 420 MB of one host's socket
 * memory. A body of unknown length (chunked) counts as over it.
 */
export const PIPELINED_BYTES_PER_CONNECTION = 64 * 1024

const { status: REFUSAL_STATUS } = errorCatalog.RATE_LIMITED
const REFUSAL_BODY = JSON.stringify({ success: false, message: 'Too many open connections from this address', code: 'RATE_LIMITED' })

/** The answer to a connection over the cap; like every answer, it has an id of its own. */
function refusal (): string {
  return `HTTP/1.1 ${REFUSAL_STATUS} ${STATUS_CODES[REFUSAL_STATUS] ?? ''}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(REFUSAL_BODY)}\r\n` +
    `X-Request-Id: ${randomUUID()}\r\nRetry-After: 1\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n${REFUSAL_BODY}`
}

/** A connection's turns: the request being served, and those pipelined behind it. */
interface Turns {
  serving: ServerResponse | null
  waiting: Array<{ bytes: number, run: () => void }>
  /** Body bytes the waiting requests declare. */
  waitingBytes: number
  /** Too much was pipelined: the answer being served is the connection's last. */
  last: boolean
}

/** Node's own test for a 100-continue expectation (lib/_http_server.js). */
export const CONTINUE_EXPECTATION = /(?:^|\W)100-continue(?:$|\W)/i

/**
 * Reads no more from the socket. Node resumes a paused socket on its own (when an answer
 * drains, when a request is dumped), so each resume is undone at once: the resume's read and
 * this pause run in the same turn, before any I/O.
 */
function stopReading (socket: Socket): void {
  socket.pause()
  socket.on('resume', () => { socket.pause() })
}

/** What a request's body may cost while it waits: its Content-Length, or all of it when chunked. */
function declaredBytes (headers: Record<string, string | string[] | undefined>): number {
  if (headers['transfer-encoding'] !== undefined) return Number.POSITIVE_INFINITY
  const length = Number(headers['content-length'] ?? 0)
  return Number.isFinite(length) ? length : Number.POSITIVE_INFINITY
}

/**
 * The connections of the listening server, beyond what REQUEST_TIMEOUT_MS (serverOptions)
 * bounds for each one:
 *
 * - How many one source holds at once. Every connection costs a file descriptor and a few
 *   KiB while its request trickles in; without a cap one address could hold thousands within
 *   one request timeout and leave no descriptor for anyone else. A connection over the cap is
 *   answered 429 at once and closed, before any of its bytes is read.
 * - One request at a time on each. Node reads on past an unanswered request and hands Fastify
 *   every request pipelined behind it, so a held refusal (plugins/refusal-pacing.ts) slowed
 *   nothing: one connection 1,000 requests deep had each of them run at once, and its held
 *   answers filled the process's cap of them. A pipelined request now waits, its hooks and
 *   handler not run, until the answer before it is written: the pace holds a pipelining client
 *   as it holds one that waits for each answer. Past PIPELINED_PER_CONNECTION waiting, or
 *   PIPELINED_BYTES_PER_CONNECTION of bodies declared by those waiting, the request being
 *   served is finished and answered with `Connection: close`, and the connection is then
 *   closed with the waiting requests never run, rather than keep them (and their unread
 *   bodies) for as long as the pace holds each; HTTP lets a server close a connection with
 *   pipelined requests unanswered (RFC 9112 §9.3.2), and the client sends them again, on a new
 *   connection, if it wants to. The running one keeps its answer: it may have sent a code.
 *   From then on nothing more is read from the connection, and the requests Node already read
 *   behind the bound (the rest of the same read) never reach Fastify: not routed, not logged,
 *   dropped with the connection. Otherwise a client that never reads kept the close from coming
 *   (its answer never finished) while every request it sent was parsed, routed and logged.
 * - Answers nobody takes. An answer the app has finished but the client does not read may wait
 *   unwritten for writeStallMs; then the connection is destroyed, with whatever waits on it.
 *   It counts from the end of the app's work, so a request held by the refusal pace or a slow
 *   relay is not cut (a socket inactivity timeout would cut those).
 * - Shutdown. Node stops checking request deadlines once the server closes, so a slow upload
 *   would hold the drain until the grace period kills the process. From the moment the app
 *   closes, every connection that is not serving a fully received request (an upload still
 *   arriving, a request line not yet sent, an idle keep-alive) is closed, again and again
 *   until the requests in flight are done; those are drained. A request still waiting behind
 *   one of them is not started: its connection closes after the answer before it.
 */
export default fp<ConnectionsOptions>(async function connectionsPlugin (fastify, options) {
  const { server } = fastify
  const sockets = new Map<Socket, Turns>()
  const perSource = new Map<string, number>()
  let closing = false

  server.on('connection', (socket: Socket) => {
    const peer = socket.remoteAddress
    let source: string | null = null
    if (options.maxPerSource > 0 && peer !== undefined && options.trustedProxies?.has(peer) !== true) {
      source = sourceBucket(peer, options.ipv6BucketPrefix) ?? peer
      const open = perSource.get(source) ?? 0
      if (open >= options.maxPerSource) {
        if (fastify.hasDecorator('metrics')) fastify.metrics.errors.inc({ code: 'RATE_LIMITED' })
        socket.pause()
        socket.end(refusal(), () => { socket.destroy() })
        return
      }
      perSource.set(source, open + 1)
    }
    sockets.set(socket, { serving: null, waiting: [], waitingBytes: 0, last: false })
    socket.once('close', () => {
      sockets.delete(socket)
      if (source === null) return
      const open = (perSource.get(source) ?? 1) - 1
      if (open === 0) perSource.delete(source)
      else perSource.set(source, open)
    })
  })

  // Fastify's handler behind a gate: a request read on a connection that is to close after
  // the answer it is serving is dropped before Fastify sees it (no routing, no log line, no
  // request object); Node keeps its bare response until the connection ends. The expectations
  // Node would answer itself come through the same gate (the hooks below answer them).
  const handlers = server.listeners('request') as Array<(request: IncomingMessage, response: ServerResponse) => void>
  server.removeAllListeners('request')
  const admit = (request: IncomingMessage, response: ServerResponse): void => {
    const turns = sockets.get(request.socket)
    if (turns !== undefined && (turns.last || request.socket.destroyed)) return
    for (const handler of handlers) handler.call(server, request, response)
  }
  server.on('request', admit)
  server.on('checkContinue', admit)
  server.on('checkExpectation', admit)

  const serve = (socket: Socket, turns: Turns, response: ServerResponse, done: () => void): void => {
    turns.serving = response
    let stall: NodeJS.Timeout | undefined
    if (options.writeStallMs > 0) {
      // The app is done with the answer; what is left is the client's to take. Nothing left in
      // the socket's buffer (the kernel took it all, as for nearly every answer) is nothing a
      // client can hold: no timer for it, which every answer would otherwise arm and clear.
      response.once('prefinish', () => {
        if (!response.writableFinished && socket.writableLength > 0) stall = setTimeout(() => { socket.destroy() }, options.writeStallMs)
      })
    }
    // 'close' also comes when the connection is lost before the answer is written.
    response.once('close', () => {
      clearTimeout(stall)
      turns.serving = null
      // An answer whose head was written before the connection was marked went out keep-alive.
      if (turns.last) {
        socket.end()
        return
      }
      const next = turns.waiting.shift()
      if (next === undefined) return
      if (closing || socket.destroyed) {
        turns.waiting.length = 0
        socket.end()
        return
      }
      turns.waitingBytes -= next.bytes
      next.run()
    })
    done()
  }
  // The first hook of every request (requests made with inject() have no connection of the server).
  fastify.addHook('onRequest', (request, reply, done) => {
    const socket = request.raw.socket
    const turns = sockets.get(socket)
    if (turns === undefined) {
      done()
      return
    }
    // Parsed from the bytes read before the connection was closed: nobody would read the answer.
    if (socket.destroyed) return
    if (turns.serving === null) {
      serve(socket, turns, reply.raw, done)
      return
    }
    // Never run: the connection closes after the answer being served.
    if (turns.last) return
    const bytes = declaredBytes(request.headers)
    if (turns.waiting.length >= PIPELINED_PER_CONNECTION || turns.waitingBytes + bytes > PIPELINED_BYTES_PER_CONNECTION) {
      request.log.debug({ waiting: turns.waiting.length, waitingBytes: turns.waitingBytes + bytes }, 'connection to close after the current answer: too much pipelined')
      turns.last = true
      stopReading(socket)
      turns.waiting.length = 0
      turns.waitingBytes = 0
      if (!turns.serving.headersSent) turns.serving.shouldKeepAlive = false
      return
    }
    turns.waitingBytes += bytes
    turns.waiting.push({ bytes, run: () => { serve(socket, turns, reply.raw, done) } })
  })

  // The expectations Node would answer itself, answered here once the request's other hooks
  // have run (its security headers set, its caller known): after them, a request's body is read.
  // - 100-continue invites the body: it is sent only if the length declared fits the route's
  //   limit; otherwise the 413 comes instead (Node then closes the connection, as the client
  //   may send the body anyway).
  // - Any other value is refused 417 in the error shape, a turn of its connection like any answer.
  fastify.addHook('preParsing', (request, reply, payload, done) => {
    const expect = request.headers.expect
    if (expect === undefined || request.raw.httpVersion !== '1.1') {
      done(null, payload)
    } else if (!CONTINUE_EXPECTATION.test(expect)) {
      done(apiError('EXPECTATION_FAILED'))
    } else {
      if (sockets.has(request.raw.socket) && !(Number(request.headers['content-length']) > request.routeOptions.bodyLimit)) reply.raw.writeContinue()
      done(null, payload)
    }
  })

  let sweeper: NodeJS.Timeout | undefined
  const closeAllButServing = (): void => {
    for (const [socket, { serving: response }] of sockets) {
      const serving = response !== null && response.req.complete && !response.writableFinished
      if (!serving) socket.destroy()
    }
  }
  fastify.addHook('preClose', (done) => {
    closing = true
    closeAllButServing()
    sweeper = setInterval(closeAllButServing, 100)
    done()
  })
  fastify.addHook('onClose', (_instance, done) => {
    clearInterval(sweeper)
    done()
  })
}, { name: 'connections', fastify: '5.x' })
