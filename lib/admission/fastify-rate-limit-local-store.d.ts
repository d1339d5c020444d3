// @fastify/rate-limit declares its plugin, not the stores it ships; this covers the in-memory
// store that lib/admission/memory-admission.ts counts velocity with.
declare module '@fastify/rate-limit/store/LocalStore.js' {
  class LocalStore {
    constructor (continueExceeding: boolean, exponentialBackoff: boolean, cache?: number)
    incr (key: string, callback: (error: Error | null, result: { current: number, ttl: number }) => void, timeWindow: number, max: number): void
  }
  export default LocalStore
}
