/*
 * Public HTTPS hosts played by loopback servers: SNS's certificate hosts
 * (sns.eu-west-1.amazonaws.com) and an attacker's (evil.example), each served on a port of
 * 127.0.0.1 with the fixture's TLS certificate. The service fetches certificates through node's
 * https.globalAgent on port 443 of the host it checked; this agent connects that host's
 * connections to its loopback server instead, so the URL the service checks, pins and fetches
 * is a real public-looking one, and a host no test serves fails to connect (never the network).
 */
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import type { IncomingMessage, ServerResponse } from 'node:http'
import https from 'node:https'
import { connect, type ConnectionOptions } from 'node:tls'
import type { Duplex } from 'node:stream'
import type { Test } from 'tap'

const KEY = readFileSync(new URL('../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')
/** The loopback servers' TLS certificate (CN and SAN localhost, 127.0.0.1): trusted by the agent only. */
export const TLS_CERT = readFileSync(new URL('../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')

export interface PlayedHost {
  /** `https://<hostname>`, as a URL names it. */
  origin: string
  /** Every request's host, port and path, in order. */
  requests: Array<{ host: string, port: number, path: string }>
}

/** hostname → loopback port, for the agent below; one map for the whole test process. */
const played = new Map<string, number>()
let installed = false

/**
 * An agent that sends each connection for a played host to its loopback server (the TLS name
 * checked is the fixture's, localhost), and fails any other at once.
 */
class PlayedHostsAgent extends https.Agent {
  override createConnection (options: ConnectionOptions & { host?: string, port?: number }, callback?: (error: Error | null, socket: Duplex) => void): Duplex {
    const port = played.get(options.host ?? '')
    if (port === undefined) {
      const socket = connect({ host: '127.0.0.1', port: 1 })
      socket.destroy(new Error(`no test server plays ${options.host ?? '?'}:${options.port ?? '?'}`))
      return socket
    }
    const socket = connect({ ...options, host: '127.0.0.1', port, servername: 'localhost', ca: TLS_CERT })
    if (callback !== undefined) socket.once('secureConnect', () => { callback(null, socket) })
    return socket
  }
}

/**
 * Serves `hostname` (port 443 as the service asks for it) from a loopback server whose
 * handler is `handle`; the agent is installed as https.globalAgent for the rest of the process.
 */
export async function playHost (t: Test, hostname: string, handle: (request: IncomingMessage, response: ServerResponse) => void): Promise<PlayedHost> {
  if (!installed) {
    https.globalAgent = new PlayedHostsAgent({ keepAlive: false })
    installed = true
  }
  const requests: PlayedHost['requests'] = []
  const open = new Set<ServerResponse>()
  const server = https.createServer({ key: KEY, cert: TLS_CERT }, (request, response) => {
    const [host, port] = (request.headers.host ?? '').split(':')
    requests.push({ host: host ?? '', port: Number(port ?? 443), path: request.url ?? '' })
    handle(request, response)
    if (!response.writableEnded) open.add(response)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  played.set(hostname, address.port)
  t.teardown(async () => {
    played.delete(hostname)
    for (const response of open) response.destroy()
    server.closeAllConnections()
    server.close()
    await once(server, 'close')
  })
  return { origin: `https://${hostname}`, requests }
}
