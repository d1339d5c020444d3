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

/** The in-memory store reached its cap: the caller answers 503 rather than grow without bound. */
export class StoreFullError extends Error {
  constructor () {
    super('token store is full')
    this.name = 'StoreFullError'
  }
}

/** Runs one store operation; any failure of the backing store becomes StoreUnavailableError. */
export async function storeCall<T> (what: string, operation: () => Promise<T>): Promise<T> {
  try {
    return await operation()
  } catch (error) {
    throw new StoreUnavailableError(`${what} failed`, { cause: error })
  }
}
