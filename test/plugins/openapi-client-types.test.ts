import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import openapiTS, { astToString, type OpenAPI3 } from 'openapi-typescript'
import ts from 'typescript'
import { errorCodes } from '../../schemas/error-catalog.js'
import { buildApp } from '../helper.js'

/**
 * A client generated from the served document (openapi-typescript, as partners would run it)
 * must type what the service sends: the rate-limit headers of a dispatch as numbers, and the
 * error code as the `ErrorCode` union a client can narrow on.
 */

const client = `
import type { components, operations } from './api.js'

type ErrorCode = components['schemas']['ErrorCode']
type ApiError = components['schemas']['Error']
type DispatchAnswers = operations['dispatchCode']['responses']

/** How many dispatches this caller may still make: a replayed answer does not say. */
export function remainingDispatches (headers: DispatchAnswers[200]['headers']): { velocity: number | undefined, quota: number | undefined, replayed: boolean } {
  const velocity: number | undefined = headers['RateLimit-Remaining']
  const quota: number | undefined = headers['Quota-Remaining']
  return { velocity, quota, replayed: headers['Idempotent-Replayed'] === 'true' }
}

export function advice (error: ApiError): string {
  switch (error.code) {
    case 'RATE_LIMITED': return 'wait for Retry-After'
    case 'QUOTA_EXCEEDED': return 'the allowance is used up'
    case 'CODE_MISMATCH': return 'ask for a new code'
    default: return error.message
  }
}

/** Every code answered with 429 by dispatch: the union narrows to one. */
export function limited (body: DispatchAnswers[429]['content']['application/json']): 'RATE_LIMITED' {
  return body.code
}

export const everyCode: Record<ErrorCode, true> = {
  ${errorCodes.map((code) => `${code}: true`).join(', ')}
}
`

// Each of these must be refused by the compiler: a code that does not exist, a header read as
// the wrong type, a header some answers lack read as always there, and a code dispatch never
// sends with 429.
const wrongClients: Record<string, { code: string, expected: number }> = {
  'an unknown code': { code: "export function f (error: components['schemas']['Error']): number { return error.code === 'NO_SUCH_CODE' ? 1 : 0 }", expected: 2367 },
  'RateLimit-Remaining read as a string': { code: "export function f (headers: operations['dispatchCode']['responses'][200]['headers']): string | undefined { return headers['RateLimit-Remaining'] }", expected: 2322 },
  'RateLimit-Remaining read as always present': { code: "export function f (headers: operations['dispatchCode']['responses'][200]['headers']): number { return headers['RateLimit-Remaining'] }", expected: 2322 },
  'a 429 code that is not RATE_LIMITED': { code: "export function f (body: operations['dispatchCode']['responses'][429]['content']['application/json']): boolean { return body.code === 'QUOTA_EXCEEDED' }", expected: 2367 }
}

function typeCheck (directory: string, file: string): ts.Diagnostic[] {
  const program = ts.createProgram([join(directory, file)], {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    types: [],
    skipLibCheck: true
  })
  return [...ts.getPreEmitDiagnostics(program)]
}

function describe (diagnostics: readonly ts.Diagnostic[]): string {
  return diagnostics.map((diagnostic) => `TS${diagnostic.code}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ')}`).join('\n')
}

t.test('types generated from the served document type-check a client, and refuse a wrong one', async (t) => {
  const { app } = await buildApp(t)
  const document = (await app.inject({ method: 'GET', url: '/openapi.json' })).json<OpenAPI3>()
  const types = astToString(await openapiTS(document))
  const directory = t.testdir({ 'api.ts': types, 'client.ts': client })

  const diagnostics = typeCheck(directory, 'client.ts')
  t.same(describe(diagnostics), '', 'the client type-checks against the generated types')

  for (const [what, { code, expected }] of Object.entries(wrongClients)) {
    const file = `wrong-${Object.keys(wrongClients).indexOf(what)}.ts`
    writeFileSync(join(directory, file), `import type { components, operations } from './api.js'\n${code}\n`)
    const errors = typeCheck(directory, file)
    t.same(errors.map((error) => error.code), [expected], `${what}: refused (${describe(errors)})`)
  }
})
