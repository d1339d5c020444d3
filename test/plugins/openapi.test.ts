import t, { type Test } from 'tap'
import { Validator } from '@seriousme/openapi-schema-validator'
import { readFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { errorCatalog, errorCodes } from '../../schemas/error-catalog.js'
import { tenantsJsonSchema } from '../../cli/tenants.js'
import { StoreFullError, StoreUnavailableError } from '../../lib/store-errors.js'
import { toApiError } from '../../plugins/errors.js'
import { documentPath, formatDocument } from '../../scripts/openapi.js'
import { bearer, buildApp } from '../helper.js'
import { send } from '../support/http.js'

interface Response {
  description: string
  headers?: Record<string, { required?: boolean }>
  content?: Record<string, { schema: { $ref?: string, allOf?: Array<{ $ref?: string, properties?: { code?: { enum?: string[] } } }> } }>
}
interface Operation {
  operationId?: string
  security?: unknown[]
  responses: Record<string, Response>
}
interface Document {
  openapi: string
  info: { version: string, license?: { name: string } }
  servers?: Array<{ url: string }>
  components: { schemas: Record<string, { enum?: string[] }>, securitySchemes: Record<string, { scheme: string }> }
  paths: Record<string, Record<string, Operation>>
}

const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string, license: string }

function operations (document: Document): Array<[string, string, Operation]> {
  return Object.entries(document.paths).flatMap(([path, item]) => Object.entries(item).map(([method, operation]): [string, string, Operation] => [path, method, operation]))
}

/** The codes an error answer lists, or null for a body that is not the error body. */
function listedCodes (response: Response): string[] | null {
  const allOf = response.content?.['application/json']?.schema.allOf
  return allOf?.[0]?.$ref === '#/components/schemas/Error' ? allOf[1]?.properties?.code?.enum ?? [] : null
}

async function servedDocument (t: Test): Promise<Document> {
  const { app } = await buildApp(t)
  const answer = await app.inject({ method: 'GET', url: '/openapi.json' })
  t.equal(answer.statusCode, 200)
  return answer.json()
}

t.test('GET /openapi.json is a valid OpenAPI 3 document, identical to the committed openapi.json', async (t) => {
  const document = await servedDocument(t)
  const result = await new Validator().validate(document as unknown as Parameters<Validator['validate']>[0])
  t.ok(result.valid, JSON.stringify(result.errors ?? null).slice(0, 2000))
  t.equal(readFileSync(documentPath, 'utf8'), formatDocument(document), 'openapi.json is stale: run npm run openapi')

  t.equal(document.info.version, manifest.version, 'info.version is package.json\'s version')
  t.equal(document.info.license?.name, manifest.license, 'info.license is package.json\'s licence')
  t.same(document.servers?.map((server) => server.url), ['/'], 'one relative server: the host serving the document, wherever it runs')
})

t.test('every operation is named, secured or public on purpose, and answers named bodies', async (t) => {
  const document = await servedDocument(t)
  const ids = operations(document).map(([, , operation]) => operation.operationId)
  t.notOk(ids.includes(undefined), 'every operation has an operationId')
  t.equal(new Set(ids).size, ids.length, 'operationIds are unique')
  for (const [path, method, operation] of operations(document)) {
    const where = `${method.toUpperCase()} ${path}`
    t.same(operation.security, ['/healthz', '/readyz', '/.well-known/jwks.json', '/feedback/ses'].includes(path) ? [] : [{ bearerAuth: [] }], `${where}: security`)
    for (const [status, response] of Object.entries(operation.responses)) {
      t.not(response.description, 'Default Response', `${where} ${status} has a real description`)
      t.equal(response.headers?.['X-Request-Id']?.required, true, `${where} ${status} documents X-Request-Id, always sent`)
      const schema = response.content?.['application/json']?.schema
      if (Number(status) < 300 || (path === '/readyz' && status === '503')) {
        t.match(schema?.$ref, /^#\/components\/schemas\/[A-Za-z]+$/, `${where} ${status} refers to a named schema`)
      } else {
        t.ok(listedCodes(response)?.length, `${where} ${status} is the shared Error, narrowed to its codes`)
      }
    }
  }
  t.ok(Object.keys(document.components.schemas).every((name) => !name.startsWith('def-')), 'no anonymous components')
  for (const name of ['Error', 'ErrorCode', 'DispatchReply', 'VerifyReply']) t.ok(document.components.schemas[name], `component ${name}`)

  const dispatch = document.paths['/otp/request']!.post!
  const verify = document.paths['/otp/verify']!.post!
  t.same(Object.keys(dispatch.responses).sort(), ['200', '400', '401', '402', '403', '408', '409', '413', '415', '417', '422', '429', '431', '500', '502', '503'])
  t.same(Object.keys(verify.responses).sort(), ['200', '400', '401', '403', '408', '413', '415', '417', '429', '431', '500', '503'])
  t.equal(document.components.securitySchemes.bearerAuth?.scheme, 'bearer')
  for (const code of ['CODE_MISMATCH', 'INVALID_CODE_FORMAT', 'INVALID_BODY', 'INVALID_JSON', 'INVALID_URL']) t.ok(listedCodes(verify.responses['400']!)?.includes(code), `verify lists ${code}`)
})

t.test('every error code the service can send is listed, under its own status', async (t) => {
  const document = await servedDocument(t)
  const enumerated = document.components.schemas.ErrorCode?.enum ?? []
  t.same([...enumerated].sort(), [...errorCodes].sort(), 'the ErrorCode enum is the catalog')
  const listedUnder = new Map<string, Set<string>>()
  for (const [, , operation] of operations(document)) {
    for (const [status, response] of Object.entries(operation.responses)) {
      for (const code of listedCodes(response) ?? []) {
        t.equal(String(errorCatalog[code as keyof typeof errorCatalog]?.status), status, `${operation.operationId ?? ''}: ${code} is listed under its own status`)
        listedUnder.set(code, (listedUnder.get(code) ?? new Set()).add(status))
      }
    }
  }
  // A 405 answers a method a path does not have: an operation that does not exist.
  for (const code of errorCodes.filter((code) => code !== 'METHOD_NOT_ALLOWED')) t.ok(listedUnder.has(code), `${code} is listed by at least one operation`)

  // What the root error handler makes of the errors it can meet (Fastify's own included).
  const fastifyError = (code: string, statusCode: number, message = code): Error => Object.assign(new Error(message), { code, statusCode })
  const handled = [
    new StoreUnavailableError('down'), new StoreFullError(), new Error('bug'), new TypeError('bug'),
    Object.assign(new SyntaxError('Unexpected token'), { statusCode: 400 }),
    Object.assign(new Error('body/email must be string'), { statusCode: 400, validation: [{ keyword: 'type', instancePath: '/email', params: {}, message: 'must be string' }], validationContext: 'body' }),
    fastifyError('FST_ERR_CTP_BODY_TOO_LARGE', 413), fastifyError('FST_ERR_CTP_INVALID_MEDIA_TYPE', 415), fastifyError('FST_ERR_CTP_INVALID_CONTENT_LENGTH', 400),
    fastifyError('FST_ERR_CTP_EMPTY_JSON_BODY', 400), fastifyError('FST_ERR_CTP_INVALID_JSON_BODY', 400), fastifyError('FST_ERR_NOT_FOUND', 404),
    fastifyError('FST_ERR_BAD_STATUS_CODE', 500), fastifyError('SOMETHING_ELSE', 405)
  ].map((error) => toApiError(error).code)
  for (const code of handled) t.ok(enumerated.includes(code), `the error handler's ${code} is listed`)

  // And what real requests get from the handler, the not-found handler and frameworkErrors.
  const { app } = await buildApp(t)
  const json = { 'content-type': 'application/json' }
  const answers = await Promise.all([
    app.inject({ method: 'GET', url: '/otp/%zz' }),
    app.inject({ method: 'GET', url: '/nowhere' }),
    app.inject({ method: 'POST', url: '/otp/request', headers: json, payload: '{"email":' }),
    app.inject({ method: 'POST', url: '/otp/request', headers: json, payload: '' }),
    app.inject({ method: 'POST', url: '/otp/request', headers: { 'content-type': 'text/plain' }, payload: 'hello' }),
    app.inject({ method: 'POST', url: '/otp/request', headers: json, payload: JSON.stringify({ email: 'a'.repeat(5000) }) })
  ])
  const sent = answers.map((answer) => answer.json().code as string)
  t.same(sent, ['INVALID_URL', 'NOT_FOUND', 'INVALID_JSON', 'INVALID_BODY', 'UNSUPPORTED_MEDIA_TYPE', 'PAYLOAD_TOO_LARGE'])
  for (const code of sent) t.ok(enumerated.includes(code), `${code}, as sent, is listed`)
})

t.test('the document leaves out what is not the API, on purpose', async (t) => {
  const document = await servedDocument(t)
  for (const path of ['/openapi.json', '/docs', '/docs/', '/docs/json', '/metrics']) t.notOk(document.paths[path], `${path} is not listed`)
  t.notOk(operations(document).some(([, method]) => method === 'options' || method === 'head'), 'no CORS preflight, no HEAD twins')
})

t.test('/docs loads over plain HTTP on any host, and says which key works for Try it out', async (t) => {
  const { app } = await buildApp(t)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  // The Host a browser would send for http://docs.example.test:<port>/docs/: nothing in the
  // page may depend on being served from a loopback name.
  const host = `docs.example.test:${port}`
  const get = async (path: string) => await send({ port, method: 'GET', path, headers: { host } })
  const page = await get('/docs/')
  t.equal(page.status, 200)
  t.match(page.headers['content-type'], /text\/html/)
  const assets = [...String(page.body).matchAll(/(?:src|href)="([^"]+)"/g)].map((match) => new URL(match[1]!, `http://${host}/docs/`))
  t.ok(assets.length >= 3, 'the page loads its scripts and styles')
  t.ok(assets.every((url) => url.origin === `http://${host}`), 'every asset comes from the page\'s own origin, over the page\'s own scheme')
  const spec = await get('/docs/json')
  t.equal(spec.status, 200, 'the UI loads its document from ./json')
  for (const [path, answer] of [['/docs/', page], ['/docs/json', spec], ...await Promise.all(assets.map(async (url) => [url.pathname, await get(url.pathname)] as const))] as const) {
    t.equal(answer.status, 200, `${path} loads`)
    const policy = String(answer.headers['content-security-policy'] ?? '')
    t.notMatch(policy, /upgrade-insecure-requests|block-all-mixed-content/, `${path}: the policy does not move requests to HTTPS`)
    if (path.endsWith('.js') || path.endsWith('/')) t.match(policy, /script-src 'self'/, `${path}: the page's own scripts may run`)
  }
  const described = spec.body as Document & { info: { description: string }, components: { securitySchemes: Record<string, { description: string }> } }
  t.match(described.info.description, /Try it out/)
  t.match(described.info.description, /SECRET_KEY_IN_BROWSER/)
  t.match(described.components.securitySchemes.bearerAuth?.description, /rk_test_DemoRestrictedKeyForLocalhostOnly0000/)

  // What the description says holds: a secret key from a page is refused, the demo
  // restricted key works from a localhost page (POST sends Origin, as browsers do).
  const dispatch = async (key: string, origin: string) => await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(key), origin }, payload: { email: 'ada@example.com' } })
  t.equal((await dispatch('sk_test_DemoSandboxKeyForLocalUseOnly000000000', `http://127.0.0.1:${port}`)).json().code, 'SECRET_KEY_IN_BROWSER')
  t.equal((await dispatch('rk_test_DemoRestrictedKeyForLocalhostOnly0000', `http://localhost:${port}`)).statusCode, 200)
})

t.test('the published tenants JSON Schema is the one the service validates with', async (t) => {
  const published = readFileSync(new URL('../../schemas/tenants.schema.json', import.meta.url), 'utf8')
  t.equal(published, tenantsJsonSchema(), 'schemas/tenants.schema.json is stale: run npm run schema')
})
