/*
 * Memory per live code, in process (MemoryTokenStore) and in Redis, for 1,000,000 codes.
 * `npm run bench:memory` (node --expose-gc); see bench/README.md.
 */
import { randomBytes } from 'node:crypto'
import { cpus } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { MemoryTokenStore } from '../lib/state/memory/token-store.js'
import { generateKey } from '../lib/keys/api-keys.js'
import { startRedis } from '../test/support/redis.js'
import { Resources } from './support/children.js'
import { CodeSeeder } from './support/seed.js'
import { TOKEN_TTL_MS, loadTokens, tokenShapes } from './support/tokens.js'

const TOKENS = 1_000_000
const SAMPLE = 1000
const TARGETS = { heapBytes: 300, redisBytes: 200 }

const gc = (globalThis as { gc?: () => void }).gc

async function heapUsed (): Promise<number> {
  if (gc === undefined) throw new Error('global.gc is missing: run with node --expose-gc (npm run bench:memory)')
  // Two collections with a pause between: the second one frees what the first left to finalise.
  gc()
  await sleep(50)
  gc()
  return process.memoryUsage().heapUsed
}

/** Heap bytes per token held by a MemoryTokenStore filled by `fill`, measured after full collections. */
async function heapPerToken (fill: (store: MemoryTokenStore) => Promise<void>): Promise<number> {
  const store = new MemoryTokenStore({ maxTokensPerScope: 2_000_000 })
  const before = await heapUsed()
  await fill(store)
  const after = await heapUsed()
  if (store.size !== TOKENS) throw new Error(`the store holds ${store.size} tokens, not ${TOKENS}`)
  await store.close()
  return (after - before) / TOKENS
}

/** Heap bytes per live code of an embedded backend, each code dispatched by the OTP service. */
async function heapPerDispatchedCode (): Promise<number> {
  const seeder = await CodeSeeder.open(generateKey('secret', 'live'), randomBytes(32), { memoryStoreMaxTokens: 2_000_000 })
  const before = await heapUsed()
  for (let i = 0; i < TOKENS; i++) await seeder.mint('bench.user@example.com')
  const after = await heapUsed()
  await seeder.close()
  return (after - before) / TOKENS
}

function usedMemory (info: string): number {
  const match = /^used_memory:(\d+)/m.exec(info)
  if (match === null) throw new Error('INFO memory has no used_memory')
  return Number(match[1])
}

async function main (resources: Resources): Promise<void> {
  const rows: Array<{ what: string, bytes: number, target: number | null }> = []

  // (a) In process. The service itself mints the codes, so the strings have the
  // representation the service gives them (V8 keeps concatenations and slices as references to
  // their parts), not just the right lengths. Every code goes to one address: the velocity,
  // lockout and quota counters stay one entry each, and the heap grows by the tokens alone.
  rows.push({
    what: 'embedded backend heap, codes dispatched by the service',
    bytes: await heapPerDispatchedCode(),
    target: TARGETS.heapBytes
  })
  // The same shapes as flat strings (a string decoded from bytes is one sequential string):
  // the floor of this store layout, which tells how much of the figure above is representation.
  const flat = (text: string): string => Buffer.from(text, 'latin1').toString('latin1')
  rows.push({
    what: 'MemoryTokenStore heap, same shapes as flat strings',
    bytes: await heapPerToken(async (store) => {
      for (let done = 0; done < TOKENS; done += 100_000) {
        for (const { token, record } of tokenShapes(100_000)) await store.put({ ...token, requestId: flat(token.requestId) }, flat(record), TOKEN_TTL_MS)
      }
    }),
    target: null
  })

  // (b) Redis.
  const redis = await startRedis()
  resources.add(redis.stop)
  const client = new Redis(redis.url)
  resources.add(async () => { client.disconnect() })
  const before = usedMemory(await client.info('memory'))
  const keys = await loadTokens(client, TOKENS)
  // Let active rehashing finish, so that no dictionary is counted twice.
  await sleep(1000)
  const after = usedMemory(await client.info('memory'))
  const pipeline = client.pipeline()
  for (let i = 0; i < SAMPLE; i++) pipeline.memory('USAGE', keys[Math.floor((i + 0.5) * TOKENS / SAMPLE)] as string)
  const usages = (await pipeline.exec() ?? []).map(([error, bytes]) => {
    if (error !== null) throw error
    return Number(bytes)
  })
  rows.push({ what: `Redis MEMORY USAGE, mean of ${SAMPLE} keys`, bytes: usages.reduce((sum, bytes) => sum + bytes, 0) / usages.length, target: TARGETS.redisBytes })
  rows.push({ what: 'Redis used_memory (after - before) / N', bytes: (after - before) / TOKENS, target: TARGETS.redisBytes })
  const redisVersion = /redis_version:(\S+)/.exec(await client.info('server'))?.[1] ?? 'unknown'

  const [shape] = tokenShapes(1)
  if (shape === undefined) throw new Error('tokenShapes(1) returned nothing')
  const width = Math.max(...rows.map(({ what }) => what.length))
  process.stdout.write([
    `bytes per live code, ${TOKENS.toLocaleString('en')} codes (shaped like ${shape.key} → ${shape.record}, TTL ${TOKEN_TTL_MS / 1000} s)`,
    `${cpus()[0]?.model ?? 'unknown'}, node ${process.version}, redis ${redisVersion}`,
    '',
    `  ${'measure'.padEnd(width)}  bytes  target`,
    ...rows.map(({ what, bytes, target }) => `  ${what.padEnd(width)}  ${bytes.toFixed(0).padStart(5)}  ${target === null ? '(floor)' : `≤ ${target}  ${bytes <= target ? 'PASS' : 'MISS'}`}`)
  ].join('\n') + '\n')
}

const resources = new Resources()
try {
  await main(resources)
} catch (error) {
  process.stderr.write(`bench:memory failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
  process.exitCode = 1
} finally {
  await resources.close()
}
