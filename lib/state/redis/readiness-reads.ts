/**
 * How long readiness waits for one Redis node's reply (INFO, INFO memory, CONFIG GET, a copy of
 * the recipient tag key's fingerprint). A frozen primary keeps a command until the command
 * timeout, longer than a kubelet waits for a probe (1 s by default): past this, the node's last
 * reply stands in, and the reads of one check run side by side, so a readiness check answers
 * within about a second whatever one node does (docs/backends.md).
 */
export const READINESS_READ_MS = 500

/** After this long an outstanding readiness command is given up and sent again (see NodeReplies.read). */
const ABANDONED_AFTER_MS = 10_000

/** A reply, or why there is none. */
export type Outcome<T> = { ok: true, value: T } | { ok: false, error: unknown }

/**
 * One reading for readiness probes, kept for `cacheMs` so that probes stay cheap; probes that
 * arrive while it is taken share it. `take` says whether its reading may be kept: one that
 * learnt nothing is taken again on the next probe.
 */
export class KeptReading<T> {
  readonly #take: () => Promise<{ value: T, keep: boolean }>
  readonly #cacheMs: number
  #kept: { value: T, atMs: number } | null = null
  #pending: Promise<T> | null = null

  constructor (take: () => Promise<{ value: T, keep: boolean }>, cacheMs: number) {
    this.#take = take
    this.#cacheMs = cacheMs
  }

  async get (): Promise<T> {
    const kept = this.#kept
    if (kept !== null && Date.now() - kept.atMs < this.#cacheMs) return kept.value
    this.#pending ??= this.#take().then(({ value, keep }) => {
      if (keep) this.#kept = { value, atMs: Date.now() }
      return value
    }).finally(() => { this.#pending = null })
    return await this.#pending
  }
}

/**
 * Each node's reply to one readiness command, waited for `deadlineMs` at most. A node that has
 * not answered by then counts with its last reply (none: `null`), and its command is not sent
 * again while it is outstanding: a frozen node holds one command per `id`, not one per probe.
 */
export class NodeReplies<T> {
  readonly #deadlineMs: number
  readonly #outstanding = new Map<string, { reply: Promise<Outcome<T>>, sentAt: number }>()
  readonly #last = new Map<string, Outcome<T>>()

  constructor (deadlineMs = READINESS_READ_MS) {
    this.#deadlineMs = deadlineMs
  }

  /** `id` names the node and command (`host:port`, a key): one reply is kept per id. */
  async read (id: string, command: () => Promise<T>): Promise<Outcome<T> | null> {
    let sent = this.#outstanding.get(id)
    // A command that neither answered nor failed in ABANDONED_AFTER_MS (a Cluster client can
    // hold one for a node it lost until its next slot refresh) is given up, so that one lost
    // command does not blind readiness to its node for good.
    if (sent === undefined || Date.now() - sent.sentAt > ABANDONED_AFTER_MS) {
      const reply: Promise<Outcome<T>> = (async () => await command())().then(
        (value): Outcome<T> => ({ ok: true, value }),
        (error: unknown): Outcome<T> => ({ ok: false, error })
      ).then((outcome) => {
        this.#last.set(id, outcome)
        if (this.#outstanding.get(id)?.reply === reply) this.#outstanding.delete(id)
        return outcome
      })
      sent = { reply, sentAt: Date.now() }
      this.#outstanding.set(id, sent)
    }
    const outstanding = sent.reply
    let timer: NodeJS.Timeout | undefined
    // Decided one turn after the timer, once replies already received have been read (as
    // lib/store-errors.ts's timeout is): a late timer must not beat a reply that is waiting.
    const late = new Promise<null>((resolve) => { timer = setTimeout(() => { setImmediate(() => { resolve(null) }) }, this.#deadlineMs) })
    try {
      return await Promise.race([outstanding, late]) ?? this.#last.get(id) ?? null
    } finally {
      clearTimeout(timer)
    }
  }
}

/** `host:port` of a node, the id of its replies. */
export function nodeId (node: { options: { host?: string | undefined, port?: number | undefined } }): string {
  return `${node.options.host ?? ''}:${node.options.port ?? ''}`
}
