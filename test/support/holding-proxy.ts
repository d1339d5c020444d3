import { connect, type Socket } from 'node:net'
import type { Test } from 'tap'
import { startTcpPeer } from './mail-peers.js'

export interface HoldingProxy {
  /** `redis://127.0.0.1:<port>`: the service's REDIS_URL. */
  readonly url: string
  /**
   * Holds the replies of the connection that next sends a command containing `marker` (a
   * script's SHA1, say), from that command on, until `release`.
   */
  holdRepliesFrom: (marker: string) => void
  /**
   * Holds the commands of the connection that next sends one containing `marker`, that one
   * included, until `release`: they reach Redis late, as through a stalled network or to a
   * stalled Redis, while every other connection goes on.
   */
  holdCommandsFrom: (marker: string) => void
  /** Whether a command with the last marker given has been seen (and what it names held). */
  readonly marked: boolean
  /** Holds every connection's replies from now on, until `release`. */
  holdAll: () => void
  /** Delivers every command and reply held, in order, and relays both ways untouched again. */
  release: () => void
  /** The replies held since the last `release`, as text: what the commands answered, late. */
  readonly heldText: string
}

interface Link {
  client: Socket
  upstream: Socket
  held: Buffer[] | null
  commandsHeld: Buffer[] | null
  /** The end of the bytes seen so far, so that a marker split across two reads is still found. */
  tail: string
}

/**
 * A TCP proxy in front of a redis-server that can hold, on one connection, the replies from
 * a given command on: Redis runs the command in time, and its caller hears of it late (past its
 * timeout), as when a reply is lost on its way or Redis stalls just after running a script. Or
 * the commands themselves: they reach Redis after the caller gave up on them. Nothing is
 * dropped: on `release` what was held goes on in order, so the client's connection stays in
 * step with its commands. Commands the caller sends after giving up (an undo) reach Redis
 * behind the first, on the same connection, as they would without the proxy.
 */
export async function startHoldingProxy (t: Test, redisPort: number): Promise<HoldingProxy> {
  const links = new Set<Link>()
  let marker: { text: string, hold: 'replies' | 'commands' } | null = null
  let marked = false
  let holdingAll = false
  let heldText = ''

  const port = await startTcpPeer(t, (client) => {
    const upstream = connect(redisPort, '127.0.0.1')
    const link: Link = { client, upstream, held: holdingAll ? [] : null, commandsHeld: null, tail: '' }
    links.add(link)
    const drop = (): void => { client.destroy(); upstream.destroy(); links.delete(link) }
    upstream.on('error', drop)
    client.on('error', drop)
    client.on('close', drop)
    upstream.on('close', drop)
    client.on('data', (chunk: Buffer) => {
      if (link.commandsHeld !== null) {
        link.commandsHeld.push(chunk)
        return
      }
      if (marker !== null) {
        const text = link.tail + chunk.toString('latin1')
        link.tail = text.slice(-marker.text.length)
        if (text.includes(marker.text)) {
          const { hold } = marker
          marker = null
          marked = true
          if (hold === 'commands') {
            link.commandsHeld = [chunk]
            return
          }
          // Held before the command leaves, so that its reply cannot slip through.
          link.held ??= []
          upstream.write(chunk)
          return
        }
      }
      upstream.write(chunk)
    })
    upstream.on('data', (chunk: Buffer) => {
      if (link.held === null) {
        client.write(chunk)
      } else {
        link.held.push(chunk)
        heldText += chunk.toString('latin1')
      }
    })
  })

  return {
    url: `redis://127.0.0.1:${port}`,
    holdRepliesFrom (text: string): void {
      marker = { text, hold: 'replies' }
      marked = false
      for (const link of links) link.tail = ''
    },
    holdCommandsFrom (text: string): void {
      marker = { text, hold: 'commands' }
      marked = false
      for (const link of links) link.tail = ''
    },
    get marked () { return marked },
    holdAll () {
      holdingAll = true
      for (const link of links) link.held ??= []
    },
    release () {
      holdingAll = false
      marker = null
      heldText = ''
      for (const link of links) {
        const commands = link.commandsHeld ?? []
        link.commandsHeld = null
        for (const chunk of commands) link.upstream.write(chunk)
        const held = link.held ?? []
        link.held = null
        for (const chunk of held) link.client.write(chunk)
      }
    },
    get heldText () { return heldText }
  }
}
