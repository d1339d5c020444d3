import { connect, type Socket } from 'node:net'
import type { Test } from 'tap'
import { startTcpPeer } from './mail-peers.js'

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
  const listening = await startTcpPeer(t, (client) => {
    connections += 1
    const lossy = connections <= lose
    const upstream = connect(Number(port), hostname)
    const drop = (): void => { client.destroy(); upstream.destroy() }
    upstream.on('error', drop)
    client.on('error', drop)
    client.on('close', () => upstream.destroy())
    client.pipe(upstream)
    if (lossy) {
      upstream.once('data', drop)
    } else {
      upstream.pipe(client)
    }
  })
  return {
    base: `http://127.0.0.1:${listening}`,
    get connections () { return connections }
  }
}

export interface Relay {
  /** The port to connect to instead of the target's. */
  readonly port: number
  /** Destroys every connection through the relay, and each new one at once: the link is down. */
  cut: () => void
}

/**
 * A TCP relay to `127.0.0.1:<target>` that the test can cut, as a network partition or a
 * dying host cuts a client off its server: bytes in flight are lost, never delivered late.
 */
export async function startRelay (t: Test, target: number): Promise<Relay> {
  const open = new Set<Socket>()
  let down = false
  const port = await startTcpPeer(t, (client) => {
    if (down) {
      client.destroy()
      return
    }
    const upstream = connect(target, '127.0.0.1')
    for (const socket of [client, upstream]) {
      open.add(socket)
      socket.on('close', () => { open.delete(socket) })
    }
    const drop = (): void => { client.destroy(); upstream.destroy() }
    upstream.on('error', drop)
    client.on('error', drop)
    client.on('close', drop)
    upstream.on('close', drop)
    client.pipe(upstream)
    upstream.pipe(client)
  })
  return {
    port,
    cut () {
      down = true
      for (const socket of open) socket.destroy()
    }
  }
}
