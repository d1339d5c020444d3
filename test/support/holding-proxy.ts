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
  /**
   * Holds the replies of every connection from the first command it sends that contains one
   * of `markers` (scripts' SHA1s, say), that one included, until `release`. Replies to what a
   * connection sent before pass: the service's client pipelines its commands, one batch at a
   * time, so a held reply to a command sent ahead of the marked ones (a clock reading, a
   * verification-log write) would keep every later command in the client until it timed out,
   * and they would reach Redis past their deadline.
   */
  holdRepliesFromEach: (markers: readonly string[]) => void
  /** How many commands containing one of holdRepliesFromEach's markers went on to Redis since it was called. */
  readonly eachMarked: number
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
  /** The markers of holdRepliesFromEach, until `release`. */
  let eachFrom: readonly string[] = []
  let eachMarked = 0
  let heldText = ''

  const port = await startTcpPeer(t, (client) => {
    const upstream = connect(redisPort, '127.0.0.1')
    const link: Link = { client, upstream, held: null, commandsHeld: null, tail: '' }
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
      if (marker !== null || eachFrom.length > 0) {
        const text = link.tail + chunk.toString('latin1')
        const seenBefore = link.tail.length
        link.tail = text.slice(-Math.max(marker?.text.length ?? 0, ...eachFrom.map((each) => each.length)))
        const marks = eachFrom.reduce((count, each) => count + occurrencesEndingAfter(text, each, seenBefore), 0)
        if (marks > 0) {
          eachMarked += marks
          link.held ??= []
        }
        if (marker !== null && text.includes(marker.text)) {
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
    holdRepliesFromEach (markers: readonly string[]): void {
      eachFrom = markers
      eachMarked = 0
      for (const link of links) link.tail = ''
    },
    get eachMarked () { return eachMarked },
    release () {
      eachFrom = []
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

/** How many times `marker` occurs in `text` ending past `from` (the text before it was counted already). */
function occurrencesEndingAfter (text: string, marker: string, from: number): number {
  let count = 0
  for (let at = text.indexOf(marker, Math.max(0, from - marker.length + 1)); at !== -1; at = text.indexOf(marker, at + marker.length)) count++
  return count
}
