import t from 'tap'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'

const root = fileURLToPath(new URL('../../', import.meta.url))
const committedTypes = 'clients/typescript/src/openapi.d.ts'

t.test('the client\'s types are what `npm run client:types` generates from the committed openapi.json', async (t) => {
  const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts
  const [command, ...args] = (scripts['client:types'] ?? '').split(' ')
  t.equal(command, 'openapi-typescript')
  const output = args.indexOf('--output') + 1
  t.equal(args[output], committedTypes, 'the script writes the committed file')
  t.ok(args.includes('openapi.json'), 'from the committed document')

  const fresh = join(t.testdir({}), 'openapi.d.ts')
  args[output] = fresh
  const run = spawnSync(process.execPath, [join(root, 'node_modules/openapi-typescript/bin/cli.js'), ...args], { cwd: root, encoding: 'utf8' })
  t.equal(run.status, 0, run.stderr)
  t.ok(readFileSync(fresh, 'utf8') === readFileSync(join(root, committedTypes), 'utf8'),
    `${committedTypes} matches the document (when it does not: npm run openapi, then npm run client:types)`)
})

t.test('the client compiles for browsers and Node alike: DOM and ES2022 only, no Node types', async (t) => {
  const configPath = join(root, 'clients/typescript/tsconfig.json')
  const config = ts.getParsedCommandLineOfConfigFile(configPath, { noEmit: true }, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) => { throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ')) }
  })
  if (config === undefined) throw new Error('no tsconfig')
  t.same(config.options.types, [], 'no @types packages (node\'s among them)')
  t.same(config.options.lib, ['lib.es2022.d.ts', 'lib.dom.d.ts'])
  const program = ts.createProgram(config.fileNames, config.options)
  const diagnostics = ts.getPreEmitDiagnostics(program).map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, ' '))
  t.same(diagnostics, [], 'it type-checks')
  for (const file of config.fileNames) {
    t.notMatch(readFileSync(file, 'utf8'), /from ['"](node:|fs|path|crypto|http)/, `${file} imports no Node module`)
  }
})

t.test('the per-operation error codes come from the document: a code an operation never answers is refused', async (t) => {
  const client = join(root, 'clients/typescript/src/index.js')
  const directory = t.testdir({
    'uses.ts': [
      `import type { DispatchErrorCode, DispatchResult, VerifyErrorCode, VerifyResult } from ${JSON.stringify(client)}`,
      "export const limited: DispatchErrorCode = 'RATE_LIMITED'",
      "export const mismatch: VerifyErrorCode = 'CODE_MISMATCH'",
      'export const requestId = (result: DispatchResult): string => result.requestId',
      'export const receipt = (result: VerifyResult): string => result.receipt',
      "export const wrongForDispatch: DispatchErrorCode = 'RECEIPT_EXPIRED'",
      "export const wrongForVerify: VerifyErrorCode = 'RECIPIENT_BLOCKED'"
    ].join('\n')
  })
  const program = ts.createProgram([join(directory, 'uses.ts')], {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'], types: []
  })
  const errors = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
    const line = diagnostic.file === undefined || diagnostic.start === undefined ? -1 : diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start).line + 1
    return `${line}: TS${diagnostic.code}`
  })
  t.same(errors, ['6: TS2322', '7: TS2322'], 'only the two wrong codes are refused')
})
