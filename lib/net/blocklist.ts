import { open } from 'node:fs/promises'
import type { Logger } from 'pino'
import { IpRangeSet } from './ip-ranges.js'

export type BlockListEvent =
  | { type: 'loaded', name: string, entries: number, rejected: number }
  | { type: 'kept', name: string, reason: string }
  | { type: 'unloaded', name: string, reason: string }

export interface BlockListOptions {
  /** Used in events, status and error messages ("tor", "hosting", "tenant:acme"). */
  name: string
  /** File paths or http(s) URLs; the list is their union. */
  sources: string[]
  refreshMs: number
  /** Per source read; default 30 s. */
  timeoutMs?: number
  /** Per source body; default 64 MiB. */
  maxBytes?: number
  onEvent?: (event: BlockListEvent) => void
  now?: () => number
  /** First retry of a list that never loaded (start()); each next one doubles. Default 1 s. */
  retryBaseMs?: number
}

export interface BlockListStatus {
  name: string
  entries: number
  loadedAt: string | null
  ageSeconds: number | null
  lastError: string | null
}

export const DEFAULT_TIMEOUT_MS = 30_000
export const DEFAULT_MAX_BYTES = 64 * 1024 * 1024
/** setTimeout turns longer delays into 1 ms, which would refresh in a tight loop. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** Lines of the Tor exit-addresses format that carry no address. */
const TOR_DESCRIPTOR_KEYWORDS = new Set(['ExitNode', 'Published', 'LastStatus'])

/**
 * The entries of a list file: one address or CIDR per line; `#` (and `;`, as in Spamhaus
 * DROP) starts a comment; blank lines, surrounding whitespace, CR and a BOM are ignored.
 * The Tor bulk exit list is already this format; from Tor's exit-addresses format the
 * address of each `ExitAddress` line is taken and the descriptor lines are skipped.
 * Any other line with several words is returned whole, so that the set builder counts it
 * as rejected instead of it vanishing unnoticed.
 */
export function parseListText (text: string): string[] {
  const entries: string[] = []
  for (const rawLine of text.split('\n')) {
    let line = rawLine
    const hash = line.indexOf('#')
    if (hash !== -1) line = line.slice(0, hash)
    const semicolon = line.indexOf(';')
    if (semicolon !== -1) line = line.slice(0, semicolon)
    line = line.trim()
    if (line === '') continue
    if (!/\s/.test(line)) {
      entries.push(line)
      continue
    }
    const words = line.split(/\s+/)
    const keyword = words[0] as string
    if (keyword === 'ExitAddress' && words[1] !== undefined) {
      entries.push(words[1])
    } else if (!TOR_DESCRIPTOR_KEYWORDS.has(keyword)) {
      entries.push(line)
    }
  }
  return entries
}

/**
 * How a source appears in messages and events: URLs without credentials or query string,
 * where access tokens tend to live.
 */
export function describeSource (source: string): string {
  if (!isHttpUrl(source)) return source
  try {
    const url = new URL(source)
    return `${url.protocol}//${url.host}${url.pathname}${url.search === '' ? '' : '?…'}`
  } catch {
    return '(invalid URL)'
  }
}

function isHttpUrl (source: string): boolean {
  return /^https?:\/\//i.test(source)
}

/**
 * Reads a list from a file path or an http(s) URL. Rejects with an Error naming the source
 * when it cannot be read, answers outside 2xx, exceeds maxBytes or takes longer than timeoutMs.
 */
export async function loadListSource (source: string, options: { timeoutMs: number, maxBytes: number }): Promise<string> {
  try {
    if (isHttpUrl(source)) return await fetchText(source, options.timeoutMs, options.maxBytes)
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(source)) throw new Error('only file paths and http(s) URLs are supported')
    return await readText(source, options.timeoutMs, options.maxBytes)
  } catch (error) {
    throw new Error(`${describeSource(source)}: ${explain(error, options.timeoutMs)}`, { cause: error })
  }
}

async function fetchText (source: string, timeoutMs: number, maxBytes: number): Promise<string> {
  let url: URL
  try {
    url = new URL(source)
  } catch {
    // fetch would repeat the whole URL, query string included, in its message.
    throw new Error('not a valid URL')
  }
  // The signal also bounds reading the body, so a server that stalls mid-transfer times out too.
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) })
  const body = response.body
  if (!response.ok) {
    await body?.cancel()
    throw new Error(`HTTP ${response.status}`)
  }
  if (Number(response.headers.get('content-length')) > maxBytes) {
    await body?.cancel()
    throw new Error(`body larger than ${maxBytes} bytes`)
  }
  if (body === null) return ''
  const reader = body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > maxBytes) {
      await reader.cancel()
      throw new Error(`body larger than ${maxBytes} bytes`)
    }
    chunks.push(value)
  }
  return Buffer.concat(chunks, total).toString('utf8')
}

async function readText (path: string, timeoutMs: number, maxBytes: number): Promise<string> {
  const handle = await open(path, 'r')
  try {
    const { size } = await handle.stat()
    if (size > maxBytes) throw new Error(`file larger than ${maxBytes} bytes`)
    const content = await handle.readFile({ signal: AbortSignal.timeout(timeoutMs) })
    // A list updater may be appending while we read.
    if (content.byteLength > maxBytes) throw new Error(`file larger than ${maxBytes} bytes`)
    return content.toString('utf8')
  } finally {
    await handle.close()
  }
}

function explain (error: unknown, timeoutMs: number): string {
  if (!(error instanceof Error)) return String(error)
  if (error.name === 'TimeoutError') return `timed out after ${timeoutMs} ms`
  // fetch reports every network failure as "fetch failed"; the reason is in the cause.
  if (error.cause instanceof Error) return `${error.message} (${error.cause.message})`
  return error.message
}

/**
 * A named block list read from one or more sources and refreshed in the background. A
 * refresh that fails, comes back empty or loses more than half of the entries keeps the last
 * good list: a broken or truncated download must not silently unblock everybody.
 */
export class BlockList {
  readonly name: string
  readonly #sources: readonly string[]
  readonly #refreshMs: number
  readonly #timeoutMs: number
  readonly #maxBytes: number
  readonly #onEvent: ((event: BlockListEvent) => void) | undefined
  readonly #now: () => number
  readonly #retryBaseMs: number
  #set: IpRangeSet | null = null
  #loadedAt: number | null = null
  #lastError: string | null = null
  #timer: NodeJS.Timeout | null = null
  #refreshing: Promise<boolean> | null = null

  constructor (options: BlockListOptions) {
    if (options.sources.length === 0) throw new TypeError(`block list "${options.name}" has no sources`)
    if (!Number.isFinite(options.refreshMs) || options.refreshMs <= 0 || options.refreshMs > MAX_TIMER_MS) {
      throw new RangeError(`block list "${options.name}": refreshMs must be from 1 to ${MAX_TIMER_MS}`)
    }
    this.name = options.name
    this.#sources = [...options.sources]
    this.#refreshMs = options.refreshMs
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS
    this.#maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES
    this.#onEvent = options.onEvent
    this.#now = options.now ?? Date.now
    this.#retryBaseMs = options.retryBaseMs ?? 1000
  }

  /** Whether the list has loaded once: until then it holds nothing. */
  get loaded (): boolean {
    return this.#set !== null
  }

  /** The initial load. Rejects with an Error naming the list and the source that failed. */
  async load (): Promise<void> {
    let build
    try {
      build = await this.#read()
    } catch (error) {
      this.#lastError = error instanceof Error ? error.message : String(error)
      throw new Error(`block list "${this.name}": ${this.#lastError}`, { cause: error })
    }
    this.#install(build.set, build.rejected)
  }

  /**
   * Re-reads every source and swaps the list in if the result is plausible. Resolves to
   * whether it was swapped; never rejects. Concurrent calls share one read.
   */
  refresh (): Promise<boolean> {
    this.#refreshing ??= this.#refreshOnce().finally(() => { this.#refreshing = null })
    return this.#refreshing
  }

  /**
   * Refreshes every refreshMs until stop(); the timer does not keep the process alive. A list
   * that has not loaded yet is tried again sooner, after retryBaseMs, doubling each time up
   * to refreshMs: a source that is not up yet (a sidecar starting, a mirror restarting) is
   * waited for without hammering it.
   */
  start (): void {
    if (this.#timer === null) this.#schedule(this.#set === null ? Math.min(this.#retryBaseMs, this.#refreshMs) : this.#refreshMs)
  }

  stop (): void {
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
  }

  has (address: string): boolean {
    return this.#set?.has(address) ?? false
  }

  status (): BlockListStatus {
    const loadedAt = this.#loadedAt
    return {
      name: this.name,
      entries: this.#set?.size ?? 0,
      loadedAt: loadedAt === null ? null : new Date(loadedAt).toISOString(),
      ageSeconds: loadedAt === null ? null : Math.max(0, Math.floor((this.#now() - loadedAt) / 1000)),
      lastError: this.#lastError
    }
  }

  #schedule (delayMs: number): void {
    const timer = setTimeout(() => {
      // A stop(), or a stop() and start(), during the refresh replaced or cleared #timer: then
      // this chain ends, and at most one timer is ever pending.
      void this.refresh().then(() => {
        if (this.#timer !== timer) return
        this.#schedule(this.#set === null ? Math.min(delayMs * 2, this.#refreshMs) : this.#refreshMs)
      })
    }, delayMs)
    timer.unref()
    this.#timer = timer
  }

  async #refreshOnce (): Promise<boolean> {
    let build
    try {
      build = await this.#read()
    } catch (error) {
      return this.#keep(error instanceof Error ? error.message : String(error))
    }
    // A list that never loaded takes what it reads, as load() does: there is nothing to keep.
    if (this.#set === null) {
      this.#install(build.set, build.rejected)
      return true
    }
    const fresh = build.set.size
    if (fresh === 0) {
      return this.#keep(build.rejected === 0 ? 'the new list is empty' : `the new list has no valid entries (${build.rejected} lines rejected)`)
    }
    const previous = this.#set.size
    if (fresh < previous / 2) {
      return this.#keep(`the new list has ${fresh} entries, less than half of the ${previous} in the last good one`)
    }
    this.#install(build.set, build.rejected)
    return true
  }

  async #read (): Promise<{ set: IpRangeSet, rejected: number }> {
    const entries: string[] = []
    // One source at a time: each may be tens of MiB of text, and only its entries need to stay.
    for (const source of this.#sources) {
      const text = await loadListSource(source, { timeoutMs: this.#timeoutMs, maxBytes: this.#maxBytes })
      for (const entry of parseListText(text)) entries.push(entry)
    }
    return IpRangeSet.fromEntries(entries)
  }

  #install (set: IpRangeSet, rejected: number): void {
    this.#set = set
    this.#loadedAt = this.#now()
    this.#lastError = null
    this.#emit({ type: 'loaded', name: this.name, entries: set.size, rejected })
  }

  #keep (reason: string): false {
    this.#lastError = reason
    this.#emit({ type: this.#set === null ? 'unloaded' : 'kept', name: this.name, reason })
    return false
  }

  #emit (event: BlockListEvent): void {
    // The listener is observability; its failure must neither undo a swap nor escape the timer.
    try {
      this.#onEvent?.(event)
    } catch {}
  }
}

/** The configured block lists together (IP_BLOCKLISTS, TOR_EXIT_LIST). */
export interface Blocklists {
  /** The name of the first list holding the address, or null. */
  match (address: string): string | null
  status (): BlockListStatus[]
  /** Whether every list has loaded once: until then the service is not ready. */
  loaded (): boolean
}

export interface BlocklistsConfig {
  ipSources: string[]
  torSource: string | null
  refreshMs: number
}

/**
 * Network block lists, read once before the service listens and refreshed in the background
 * afterwards (until `stop`), where a failed or suspicious refresh keeps the last good list. A
 * list that cannot be read at start does not stop the process (in a cluster that is a crash
 * loop, often only because a sidecar or a mirror is not up yet): it is retried with backoff,
 * and until every list has loaded the service is not ready and the API answers 503 rather than
 * serve without the blocks the operator asked for.
 */
export async function loadBlocklists ({ ipSources, torSource, refreshMs }: BlocklistsConfig, log: Pick<Logger, 'info' | 'warn' | 'error'>): Promise<Blocklists & { stop: () => void }> {
  const lists: BlockList[] = []
  const onEvent = (event: BlockListEvent): void => {
    if (event.type === 'kept') log.warn({ list: event.name, reason: event.reason }, 'block list refresh refused; keeping the last good list')
    else if (event.type === 'unloaded') log.error({ list: event.name, reason: event.reason }, 'block list could not be loaded; not ready until it is, retrying')
    else log.info({ list: event.name, entries: event.entries }, 'block list loaded')
  }
  if (ipSources.length > 0) lists.push(new BlockList({ name: 'ip', sources: ipSources, refreshMs, onEvent }))
  if (torSource !== null) lists.push(new BlockList({ name: 'tor', sources: [torSource], refreshMs, onEvent }))
  await Promise.all(lists.map(async (list) => {
    try {
      await list.load()
    } catch (error) {
      log.error({ list: list.name, reason: (error as Error).message }, 'block list could not be loaded; not ready until it is, retrying')
    }
  }))
  for (const list of lists) list.start()
  return {
    match (address) {
      for (const list of lists) if (list.has(address)) return list.name
      return null
    },
    status () {
      return lists.map((list) => list.status())
    },
    loaded () {
      return lists.every((list) => list.loaded)
    },
    stop () {
      for (const list of lists) list.stop()
    }
  }
}
