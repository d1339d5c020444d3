/*
 * The import rules `npm run lint` checks (.dependency-cruiser.cjs, lib/'s layers in
 * scripts/lib-layers.cjs) bite: on a small tree of its own, dependency-cruiser with the
 * project's configuration reports exactly the imports that break a layer and none of the
 * imports the layers allow.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const root = fileURLToPath(new URL('../../', import.meta.url))

/** Each file of the tree and the files it imports. */
const TREE: Record<string, string[]> = {
  'lib/net/address.ts': [],
  'lib/net/cycle-a.ts': ['lib/net/cycle-b.ts'],
  'lib/net/cycle-b.ts': ['lib/net/cycle-a.ts'],
  'lib/net/lost.ts': ['lib/net/nowhere.ts'],
  'lib/otp/service.ts': ['lib/net/address.ts', 'lib/state/tokens.ts', 'lib/state/index.ts', 'lib/state/redis/tokens.ts'],
  'lib/net/runs-up.ts': ['lib/otp/service.ts'],
  'lib/quota/store.ts': ['lib/receipts/store.ts'],
  'lib/receipts/store.ts': [],
  'lib/state/tokens.ts': ['lib/net/address.ts'],
  'lib/state/memory/tokens.ts': ['lib/state/tokens.ts', 'lib/quota/store.ts'],
  'lib/state/memory/clock.ts': ['lib/net/address.ts'],
  'lib/state/redis/tokens.ts': ['lib/state/tokens.ts'],
  'lib/state/index.ts': ['lib/state/memory/tokens.ts', 'lib/state/redis/tokens.ts'],
  'lib/admission/gate.ts': ['lib/state/tokens.ts', 'lib/receipts/store.ts'],
  'lib/compose.ts': ['lib/otp/service.ts', 'lib/state/index.ts', 'lib/state/memory/tokens.ts'],
  'plugins/gauges.ts': ['lib/state/index.ts', 'lib/state/redis/tokens.ts'],
  'lib/unplaced/thing.ts': ['lib/net/address.ts'],
  'lib/mail/delivery/mailer.ts': ['plugins/mailer.ts'],
  'plugins/mailer.ts': ['lib/mail/delivery/log.ts'],
  'lib/mail/delivery/log.ts': [],
  'schemas/env.ts': ['lib/net/address.ts']
}

/** Files importing packages by name: ioredis, which only the Redis adapter may import. */
const PACKAGE_IMPORTS: Record<string, string> = {
  'lib/state/redis/client.ts': 'ioredis',
  'plugins/redis-status.ts': 'ioredis'
}

function specifier (from: string, to: string): string {
  const up = from.split('/').slice(0, -1).map(() => '..')
  return `${up.join('/')}/${to.replace(/\.ts$/, '.js')}`
}

t.test('the configuration reports the imports that break a layer, and only those', async (t) => {
  const tree = mkdtempSync(join(tmpdir(), 'layers-'))
  t.teardown(() => rmSync(tree, { recursive: true, force: true }))
  writeFileSync(join(tree, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', strict: true } }))
  for (const [file, imports] of Object.entries(TREE)) {
    mkdirSync(join(tree, dirname(file)), { recursive: true })
    const lines = imports.map((target, index) => `import * as m${index} from '${specifier(file, target)}'\nexport const u${index} = m${index}`)
    writeFileSync(join(tree, file), `${lines.join('\n')}\nexport const here = '${file}'\n`)
  }
  mkdirSync(join(tree, 'node_modules/ioredis'), { recursive: true })
  writeFileSync(join(tree, 'node_modules/ioredis/package.json'), JSON.stringify({ name: 'ioredis', version: '0.0.0', main: 'index.js' }))
  writeFileSync(join(tree, 'node_modules/ioredis/index.js'), 'exports.Redis = class Redis {}\n')
  for (const [file, name] of Object.entries(PACKAGE_IMPORTS)) {
    mkdirSync(join(tree, dirname(file)), { recursive: true })
    writeFileSync(join(tree, file), `import * as m from '${name}'\nexport const u = m\n`)
  }

  const run = spawnSync(process.execPath, [join(root, 'node_modules/dependency-cruiser/bin/dependency-cruiser.mjs'), '--config', join(root, '.dependency-cruiser.cjs'), '--output-type', 'json', 'lib', 'plugins', 'schemas'], { cwd: tree, encoding: 'utf8' })
  t.equal(run.stderr, '', 'no error from dependency-cruiser')
  const result = JSON.parse(run.stdout) as { summary: { violations: Array<{ from: string, to: string, rule: { name: string } }> } }
  const found = result.summary.violations.map((violation) => `${violation.rule.name}: ${violation.from} → ${violation.to}`).sort()

  t.same(found, [
    'lib-below-the-app: lib/mail/delivery/mailer.ts → plugins/mailer.ts',
    'no-circular: lib/net/cycle-a.ts → lib/net/cycle-b.ts',
    'lib-layers: lib/net/runs-up.ts → lib/otp/service.ts',
    'lib-layers: lib/quota/store.ts → lib/receipts/store.ts',
    'lib-layers: lib/state/memory/tokens.ts → lib/quota/store.ts',
    'ioredis-in-the-redis-adapter: plugins/redis-status.ts → node_modules/ioredis/index.js',
    'lib-unplaced: lib/unplaced/thing.ts → lib/net/address.ts',
    'not-to-unresolvable: lib/net/lost.ts → ../../lib/net/nowhere.js',
    'schemas-import-nothing-of-the-service: schemas/env.ts → lib/net/address.ts',
    'stores-chosen-in-state: lib/compose.ts → lib/state/memory/tokens.ts',
    'stores-chosen-in-state: lib/otp/service.ts → lib/state/redis/tokens.ts',
    'stores-chosen-in-state: plugins/gauges.ts → lib/state/redis/tokens.ts'
  ].sort(), 'a cycle, an import that does not resolve, an upward import (the storage adapters into the domain too), two units of one layer, an adapter or ioredis outside lib/state, an unplaced folder, lib to plugins, schemas to lib')
})
