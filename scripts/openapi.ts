import { writeFileSync } from 'node:fs'
import { Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import emailOtp, { serverOptions } from '../app.js'
import { parseConfig } from '../lib/config/from-env.js'

/** Where the committed copy of the OpenAPI document lives: the repository root. */
export const documentPath = fileURLToPath(new URL('../openapi.json', import.meta.url))

/** The document as committed: the served JSON, indented by two spaces, with a final newline. */
export function formatDocument (document: unknown): string {
  return JSON.stringify(document, null, 2) + '\n'
}

/**
 * Builds the service in this process (embedded stores, nothing listens, nothing is mailed)
 * and writes the document it serves at GET /openapi.json. The document depends on the code
 * only, never on the configuration, so a fixed one is used.
 */
async function writeDocument (): Promise<void> {
  const config = parseConfig({ LOG_LEVEL: 'silent' })
  const app = Fastify(serverOptions(config))
  await app.register(emailOtp, { config, mailLog: new Writable({ write: (_chunk, _encoding, done) => { done() } }) })
  await app.ready()
  try {
    writeFileSync(documentPath, formatDocument(app.swagger()))
  } finally {
    await app.close()
  }
  process.stdout.write(`wrote ${documentPath}\n`)
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) await writeDocument()
