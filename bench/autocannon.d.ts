// autocannon ships no type declarations; this covers the part of its programmatic API that
// bench/support/load.ts uses.
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events'

  namespace autocannon {
    interface Request {
      method?: string
      path?: string
      headers?: Record<string, string>
      body?: string | Buffer
      /** Called before every send; the returned request is what goes on the wire. */
      setupRequest?: (request: Request, context: Record<string, unknown>) => Request
      onResponse?: (status: number, body: string, context: Record<string, unknown>, headers: Record<string, string>) => void
    }

    interface Options {
      url: string
      connections?: number
      /** Seconds; ignored when `amount` is set. */
      duration?: number
      /** Total number of requests, spread over the connections. */
      amount?: number
      requests?: Request[]
    }

    interface Result {
      /** Connection errors, timeouts included. */
      errors: number
    }
  }

  /** Emits 'response' (client, status, bytes, milliseconds) for every answer. */
  function autocannon (options: autocannon.Options, callback: (error: Error | null, result: autocannon.Result) => void): EventEmitter

  export = autocannon
}
