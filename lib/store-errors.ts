import { AsyncLocalStorage } from 'node:async_hooks'

/**
 * Failures of the shared stores (Redis for tokens, counters, quota, idempotency, the sandbox
 * inbox), as the API answers them: 503, never 500, never a pass.
 */

/** The backing store cannot answer right now (Redis down or slow): the caller answers 503. */
export class StoreUnavailableError extends Error {
  constructor (message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'StoreUnavailableError'
  }
}

/**
 * An in-memory store reached its cap (for the tenant asking): the caller answers 503 with
 * `answer` rather than grow without bound or forget what another caller needs.
 */
export class StoreFullError extends Error {
  readonly answer: string

  constructor (what = 'token store', answer = 'Too many codes are outstanding; retry later') {
    super(`${what} is full`)
    this.name = 'StoreFullError'
    this.answer = answer
  }
}

/** What the store calls of one request share: how long each may wait, and whether one already waited in vain. */
interface RequestBudget {
  /** Null for the in-memory stores, which answer at once. */
  timeoutMs: number | null
  stalled: boolean
}

const requests = new AsyncLocalStorage<RequestBudget>()

/**
 * Runs `work` (an HTTP request's handling) with one budget for the store: each call waits at
 * most `timeoutMs` (REDIS_COMMAND_TIMEOUT_MS), and once one timed out the store is known
 * stalled and every later call in the same request fails at once, so a frozen Redis costs a
 * request one command timeout, not one per command.
 */
export function withStoreBudget<T> (timeoutMs: number | null, work: () => T): T {
  return requests.run({ timeoutMs, stalled: false }, work)
}

/**
 * The operation, or a timeout after `timeoutMs`. The timeout is decided one turn of the event
 * loop after its timer fires, once replies already received have been read: on a busy process
 * a timer can fire late, in the same turn as the reply it would otherwise beat, and a reply
 * received is a script that ran (lib/state/redis/fence.ts).
 */
async function bounded<T> (operation: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const expired = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => { setImmediate(() => { reject(new Error('Command timed out')) }) }, timeoutMs)
  })
  try {
    return await Promise.race([operation, expired])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * A timeout, or a fenced script that started too late (lib/state/redis/fence.ts): either way Redis
 * is not answering in time.
 */
function stalledBy (error: unknown): boolean {
  const message = error instanceof Error ? error.message : ''
  return message === 'Command timed out' || message.startsWith('FENCED')
}

/** Runs one store operation; any failure of the backing store becomes StoreUnavailableError. */
export async function storeCall<T> (what: string, operation: () => Promise<T>): Promise<T> {
  const request = requests.getStore()
  if (request?.stalled === true) throw new StoreUnavailableError(`${what} not tried: the store did not answer in time earlier in this request`)
  try {
    const timeoutMs = request?.timeoutMs ?? null
    return timeoutMs === null ? await operation() : await bounded(operation(), timeoutMs)
  } catch (error) {
    if (request !== undefined && stalledBy(error)) request.stalled = true
    throw new StoreUnavailableError(`${what} failed`, { cause: error })
  }
}

/**
 * Runs an operation that gives something back (a refund, the deletion of a code whose mail did
 * not leave): sent even when the store is known stalled, since landing late only brings the
 * state closer to what the answer said; waited for only when it is not.
 */
export async function storeUndo<T> (what: string, operation: () => Promise<T>): Promise<T> {
  if (requests.getStore()?.stalled !== true) return await storeCall(what, operation)
  operation().catch(() => {})
  throw new StoreUnavailableError(`${what} sent, not waited for: the store did not answer in time earlier in this request`)
}
