import { once } from 'node:events'
import { request as httpRequest, type Agent } from 'node:http'
import { connect, type Socket } from 'node:net'
import type { FastifyInstance } from 'fastify'

export interface RawAnswer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: any
}

export interface RawRequest {
  port: number
  host?: string
  /** Source address of the client socket: 127.0.0.2, 127.0.0.3… are real distinct sources. */
  localAddress?: string
  method?: string
  path: string
  /** A list sends the header on as many lines. */
  headers?: Record<string, string | string[]>
  body?: string | Buffer
  /** Send the body with chunked transfer encoding, without Content-Length. */
  chunked?: boolean
  /** Kept-alive connections of this agent (its own source address); a new connection otherwise. */
  agent?: Agent
  /** How long the answer may take (10 s). */
  timeoutMs?: number
}

/** One request over a real socket, so the service sees a real source address. */
export async function send (options: RawRequest): Promise<RawAnswer> {
  return await new Promise((resolve, reject) => {
    const body = options.body === undefined ? undefined : Buffer.from(options.body)
    const headers: Record<string, string | string[]> = { ...options.headers }
    if (body !== undefined && options.chunked !== true) headers['content-length'] = String(body.length)
    const outgoing = httpRequest({
      host: options.host ?? '127.0.0.1',
      port: options.port,
      method: options.method ?? 'POST',
      path: options.path,
      headers,
      ...(options.localAddress === undefined ? {} : { localAddress: options.localAddress }),
      agent: options.agent ?? false
    }, (response) => {
      let text = ''
      response.on('data', (chunk: Buffer) => { text += chunk.toString() })
      response.on('end', () => {
        let parsed: unknown = text
        try { parsed = JSON.parse(text) } catch { /* not JSON */ }
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body: parsed })
      })
    })
    const timeoutMs = options.timeoutMs ?? 10_000
    outgoing.setTimeout(timeoutMs, () => { outgoing.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)) })
    // The service may answer 413 and close before the whole body is written.
    outgoing.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') reject(error)
    })
    if (body !== undefined) {
      if (options.chunked === true) {
        for (let offset = 0; offset < body.length; offset += 16384) outgoing.write(body.subarray(offset, offset + 16384))
      } else {
        outgoing.write(body)
      }
    }
    outgoing.end()
  })
}

/** Listens on a free port of `host` (loopback by default); returns the port. */
export async function listenApp (app: FastifyInstance, host = '127.0.0.1'): Promise<number> {
  await app.listen({ host, port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening')
  return address.port
}

/** A raw connection to the service, for tests that write the bytes themselves. */
export interface RawConnection {
  socket: Socket
  /** Everything the server sent on it so far. */
  received: () => string
  closed: Promise<unknown>
}

/** A connection (from `localAddress`, when given), once established; it sends nothing until asked. */
export async function openConnection (port: number, localAddress?: string): Promise<RawConnection> {
  const socket = connect({ port, host: '127.0.0.1', ...(localAddress === undefined ? {} : { localAddress }) })
  let text = ''
  socket.on('data', (chunk: Buffer) => { text += chunk.toString() })
  socket.on('error', () => {})
  const closed = once(socket, 'close')
  await once(socket, 'connect')
  return { socket, received: () => text, closed }
}
