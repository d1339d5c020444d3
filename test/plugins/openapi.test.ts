import t from 'tap'
import { Validator } from '@seriousme/openapi-schema-validator'
import { readFileSync } from 'node:fs'
import { errorCatalog } from '../../schemas/error-catalog.js'
import { tenantsJsonSchema } from '../../lib/cli/tenants-schema.js'
import { buildApp } from '../helper.js'

t.test('GET /openapi.json is a valid OpenAPI 3 document listing every answer', async (t) => {
  const { app } = await buildApp(t)
  const answer = await app.inject({ method: 'GET', url: '/openapi.json' })
  t.equal(answer.statusCode, 200)
  const document = answer.json()
  const result = await new Validator().validate(document)
  t.ok(result.valid, JSON.stringify(result.errors ?? null).slice(0, 2000))

  const dispatch = document.paths['/otp/request'].post
  const verify = document.paths['/otp/verify'].post
  t.same(Object.keys(dispatch.responses).sort(), ['200', '400', '401', '402', '403', '408', '409', '413', '415', '422', '429', '431', '500', '502', '503'])
  t.same(Object.keys(verify.responses).sort(), ['200', '400', '401', '403', '408', '413', '415', '429', '431', '500', '503'])
  t.same(dispatch.security, [{ bearerAuth: [] }])
  t.equal(document.components.securitySchemes.bearerAuth.scheme, 'bearer')

  const verifyCodes = verify.responses['400'].content['application/json'].schema.properties.code
  const listed = JSON.stringify(verifyCodes)
  for (const code of ['CODE_MISMATCH', 'INVALID_CODE_FORMAT', 'INVALID_BODY', 'INVALID_JSON']) t.match(listed, code)
  for (const [status, body] of Object.entries(dispatch.responses) as Array<[string, { content: { 'application/json': { schema: { properties: { code?: unknown } } } } }]>) {
    if (status === '200') continue
    const codes = JSON.stringify(body.content['application/json'].schema.properties.code)
    for (const [code, entry] of Object.entries(errorCatalog)) {
      if (codes.includes(`"${code}"`)) t.equal(String(entry.status), status, `${code} is listed under its own status`)
    }
  }
  t.notOk(document.paths['/openapi.json'], 'the document does not list itself')
})

t.test('GET /docs serves the browsable UI', async (t) => {
  const { app } = await buildApp(t)
  const answer = await app.inject({ method: 'GET', url: '/docs/' })
  t.equal(answer.statusCode, 200)
  t.match(answer.headers['content-type'], /text\/html/)
  t.match(answer.body, /swagger/i)
})

t.test('the published tenants JSON Schema is the one the service validates with', async (t) => {
  const published = readFileSync(new URL('../../schemas/tenants.schema.json', import.meta.url), 'utf8')
  t.equal(published, tenantsJsonSchema(), 'schemas/tenants.schema.json is stale: run npm run schema')
})
