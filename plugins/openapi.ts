import fp from 'fastify-plugin'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import { readManifest } from '../lib/manifest.js'
import { DEMO_RESTRICTED_KEY } from '../lib/tenants-file/demo.js'
import { namedSchemas } from '../schemas/components.js'
import type { ErrorCode } from '../schemas/error-catalog.js'
import { documentedErrorCodes } from '../schemas/errors.js'
import { responseHeaderNames, responseHeaderPlacements, responseHeaders, type ResponseHeaderName } from '../schemas/headers.js'

/** The headers the placement table gives one answer of one operation, and whether each is always sent. */
function headersOf (operationId: string | undefined, status: number, codes: readonly ErrorCode[] | null): Map<ResponseHeaderName, boolean> {
  const required = new Map<ResponseHeaderName, boolean>()
  for (const placement of responseHeaderPlacements) {
    if (placement.operations !== undefined && (operationId === undefined || !placement.operations.includes(operationId))) continue
    if (placement.statuses !== undefined && !placement.statuses.includes(status)) continue
    // An answer that may carry other codes than the row's carries its headers only sometimes.
    const listed = codes ?? []
    const matching = placement.codes === undefined ? listed : listed.filter((code) => placement.codes?.includes(code) === true)
    if (placement.codes !== undefined && matching.length === 0) continue
    const always = placement.required === true && matching.length === listed.length
    for (const name of placement.headers) required.set(name, required.get(name) === true || always)
  }
  // In the order of the header list, whatever the order of the rows.
  return new Map(responseHeaderNames.filter((name) => required.has(name)).map((name) => [name, required.get(name) === true]))
}

interface DocumentResponse {
  headers?: Record<string, unknown>
  content?: Record<string, { schema?: unknown }>
}
interface DocumentOperation {
  operationId?: string
  responses?: Record<string, DocumentResponse>
}
interface Document {
  paths?: Record<string, Record<string, DocumentOperation> | undefined>
}

/**
 * Describes the response headers on every answer that carries them. Inline rather than as
 * shared components: whether a header is always sent depends on the answer, and generated
 * clients read that from each answer's own `required`.
 */
function documentResponseHeaders<T extends Document> (document: T): T {
  for (const pathItem of Object.values(document.paths ?? {})) {
    for (const operation of Object.values(pathItem ?? {})) {
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        const codes = documentedErrorCodes(response.content?.['application/json']?.schema)
        const headers = headersOf(operation.operationId, Number(status), codes)
        if (headers.size === 0) continue
        response.headers = Object.fromEntries([...headers].map(([name, required]) => {
          const { description, schema, ...rest }: { description: string, schema: unknown, example?: string } = responseHeaders[name]
          return [name, { description, ...(required ? { required } : {}), schema: JSON.parse(JSON.stringify(schema)) as unknown, ...rest }]
        }))
      }
    }
  }
  return document
}

const DEMO_RESTRICTED_KEY_HINT = `With no tenants file, the built-in demo tenant's restricted sandbox key \`${DEMO_RESTRICTED_KEY}\` works from pages served on \`localhost\` and \`127.0.0.1\`.`

/**
 * The OpenAPI document is generated from the route schemas; nothing is written by hand. The
 * named schemas become components, the response headers come from one table
 * (schemas/headers.ts), and /docs serves the browsable UI.
 */
export default fp(async function openapiPlugin (fastify) {
  const manifest = readManifest()
  for (const schema of namedSchemas) fastify.addSchema(schema)

  await fastify.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: manifest.name,
        version: manifest.version,
        license: { name: manifest.license, url: `https://spdx.org/licenses/${manifest.license}.html` },
        // The service is self-hosted: whoever runs this deployment answers for it.
        contact: { name: 'The operator of this deployment: quote the answer\'s X-Request-Id' },
        description: 'Proves that a person controls an email address: dispatch sends a 6-digit code, verify checks a guess once. ' +
          'Every error answers `{ success: false, message, code }` with a stable `code` (the `ErrorCode` schema lists them all).\n\n' +
          '**Try it out** (in `/docs`) runs in the browser, which sends an `Origin` header with every POST: a secret key is refused there ' +
          '(403 `SECRET_KEY_IN_BROWSER`). Authorize with a restricted sandbox key (`rk_test_…`) whose origins include the host serving this page. ' +
          DEMO_RESTRICTED_KEY_HINT + ' ' +
          'A same-origin GET (`/usage`, `/sandbox/messages`) carries no `Origin`: use a secret sandbox key (`sk_test_…`) for those.'
      },
      servers: [{ url: '/', description: 'The host serving this document' }],
      tags: [
        { name: 'otp', description: 'Dispatch a code and verify a guess.' },
        { name: 'account', description: 'The tenant\'s allowance.' },
        { name: 'sandbox', description: 'What sandbox (test) keys sent.' },
        { name: 'templates', description: 'The tenant\'s message wording, as its users get it.' },
        { name: 'operations', description: 'Liveness and readiness probes; no key needed.' },
        { name: 'feedback', description: 'Delivery events from the mail provider (SES through SNS); signed by SNS, no key.' },
        { name: 'receipts', description: 'Signed proofs of a verification: the keys that check them, and their one redemption by the tenant\'s backend.' }
      ],
      security: [{ bearerAuth: [] }],
      components: {
        securitySchemes: {
          bearerAuth: {
            type: 'http',
            scheme: 'bearer',
            description: 'An API key: `sk_live_…`/`sk_test_…` (secret, server side) or `rk_live_…`/`rk_test_…` (restricted, browser, checked against its Origin allow-list). `test` keys are sandbox keys. ' +
              'In Try it out, use a restricted sandbox key allowed for this page\'s host. ' + DEMO_RESTRICTED_KEY_HINT
          }
        }
      }
    },
    refResolver: {
      // Named schemas keep their $id as their component name (the default numbers them def-0, def-1…).
      buildLocalReference: (json, _baseUri, _fragment, index) => typeof json.$id === 'string' ? json.$id : `def-${index}`
    },
    transformObject: (documentObject) => 'openapiObject' in documentObject
      ? documentResponseHeaders(documentObject.openapiObject as Document & typeof documentObject.openapiObject)
      : documentObject.swaggerObject
  })
  await fastify.register(swaggerUi, {
    routePrefix: '/docs',
    staticCSP: true,
    // The UI's default policy ends with upgrade-insecure-requests: served over plain HTTP on a
    // host other than localhost, the browser then asks for its scripts over HTTPS and the page
    // stays blank.
    transformStaticCSP: (header) => header.split(';').map((directive) => directive.trim())
      .filter((directive) => directive !== '' && directive !== 'upgrade-insecure-requests').join('; ')
  })
  fastify.get('/openapi.json', { schema: { hide: true } }, async () => fastify.swagger())
}, { name: 'openapi', fastify: '5.x' })
