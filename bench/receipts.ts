/*
 * CPU per operation of what a successful verify adds (the receipt) and what redeem does, in
 * process, without HTTP: `npm run build && tsc -p tsconfig.json --outDir .bench-build &&
 * node .bench-build/bench/receipts.js`. Each figure is user + system CPU of the whole
 * process (the WebCrypto signature runs on libuv's thread pool) divided by the operations.
 */
import { createSecretKey, generateKeyPairSync, randomBytes } from 'node:crypto'
import { addressHash } from '../lib/receipts/address-hash.js'
import { ReceiptIssuer } from '../lib/receipts/receipt-issuer.js'
import { deriveReceiptSigningKeys, parseReceiptSigningKeys, prepareSigningKeys, type ReceiptKeyMaterial } from '../lib/receipts/signing-keys.js'

const OPERATIONS = 20_000
const WARMUP = 2_000
const subject = { tenant: 'bench', mode: 'live' as const, requestId: 'otp_3q2-7wX0aH4vQm1sT9bK8c', addressHash: 'AAAAAAAAAAAAAAAAAAAAAA', epoch: 'AAAAAAAAAAAAAAAAAAAAAA' }

async function cpuMicros (operation: () => Promise<unknown> | unknown): Promise<number> {
  for (let i = 0; i < WARMUP; i++) await operation()
  const before = process.cpuUsage()
  for (let i = 0; i < OPERATIONS; i++) await operation()
  const used = process.cpuUsage(before)
  return (used.user + used.system) / OPERATIONS
}

async function issuerFor (keys: ReceiptKeyMaterial[]): Promise<ReceiptIssuer> {
  return new ReceiptIssuer({ keys: await prepareSigningKeys(keys), issuer: 'https://otp.example.com', ttlSeconds: 300 })
}

async function main (): Promise<void> {
  const p256 = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64')
  const ed25519 = await issuerFor(await deriveReceiptSigningKeys([{ id: 'k1', secret: randomBytes(32) }]))
  const es256 = await issuerFor(parseReceiptSigningKeys(`p256:${p256}`))
  const receipt = await ed25519.issue(subject)
  const addressKey = createSecretKey(randomBytes(32))
  const rows: Array<[string, number]> = [
    ['issue a receipt, Ed25519 (EdDSA)', await cpuMicros(async () => await ed25519.issue(subject))],
    ['issue a receipt, P-256 (ES256)', await cpuMicros(async () => await es256.issue(subject))],
    ['check a receipt, Ed25519 (redeem)', await cpuMicros(async () => await ed25519.check(receipt))],
    ['address hash (every dispatch)', await cpuMicros(() => addressHash(addressKey, 'ada.lovelace@example.com'))]
  ]
  process.stdout.write(`node ${process.version}, ${OPERATIONS} operations each\n`)
  for (const [what, micros] of rows) process.stdout.write(`${what.padEnd(40)} ${micros.toFixed(1).padStart(7)} µs CPU\n`)
}

await main()
