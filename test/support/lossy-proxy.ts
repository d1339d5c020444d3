import { connect, createServer, type Socket } from 'node:net'
import { once } from 'node:events'
import type { Test } from 'tap'

export interface LossyProxy {
  /** `http://127.0.0.1:<port>`: use it as the service's base URL. */
  readonly base: string
  /** Connections accepted so far. */
  readonly connections: number
}

/**
 * A TCP proxy in front of a service that loses the answer on its first `lose` connections:
 * the request reaches the service whole and is processed, and the client's connection is
 * destroyed as the first byte of the answer comes back, as when a network drops a reply.
 * Later connections are relayed both ways untouched.
 */
export async function startLossyProxy (t: Test, target: string, lose = 1): Promise<LossyProxy> {
  const { hostname, port } = new URL(target)
  let connections = 0
  const sockets = new Set<Socket>()
  const server = createServer((client) => {
    connections += 1
    const lossy = connections <= lose
    const upstream = connect(Number(port), hostname)
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
      socket.on('error', () => { client.destroy(); upstream.destroy() })
    }
    client.pipe(upstream)
    if (lossy) {
      upstream.once('data', () => { client.destroy(); upstream.destroy() })
    } else {
      upstream.pipe(client)
    }
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy()
    server.close()
    await once(server, 'close')
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return {
    base: `http://127.0.0.1:${address.port}`,
    get connections () { return connections }
  }
}
