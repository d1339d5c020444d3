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

/** Runs one store operation; any failure of the backing store becomes StoreUnavailableError. */
export async function storeCall<T> (what: string, operation: () => Promise<T>): Promise<T> {
  try {
    return await operation()
  } catch (error) {
    throw new StoreUnavailableError(`${what} failed`, { cause: error })
  }
}
