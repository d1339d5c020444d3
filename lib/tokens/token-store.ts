/**
 * Where issued codes wait for their verify. Values are opaque records (a keyed hash and a
 * recipient tag), never a plaintext code. Both implementations pass test/token-store.test.ts.
 */
export interface TokenStore {
  readonly kind: 'memory' | 'redis'
  /** Stores the record unless the key already exists; false on a collision. */
  put (key: string, record: string, ttlMs: number): Promise<boolean>
  /** Reads and removes the record in one atomic step: of concurrent takers, one gets it. */
  take (key: string): Promise<string | null>
  /** Removes the record, if any (a code whose mail did not leave). */
  delete (key: string): Promise<void>
  ready (): Promise<boolean>
  close (): Promise<void>
}
