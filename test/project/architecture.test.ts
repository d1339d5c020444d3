/*
 * docs/architecture.md describes the tree as it is: every path it names exists, every folder of
 * lib/ has a row in its folder table, and every plugin and route file is named. A folder or a
 * plugin added, moved or removed without the page fails here.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const root = fileURLToPath(new URL('../../', import.meta.url))
const page = readFileSync(join(root, 'docs', 'architecture.md'), 'utf8')

function named (text: string): string[] {
  return [...text.matchAll(/(?<![\w/.-])((?:app|server|lib|plugins|routes|schemas|scripts|clients|examples|bench|test|cli)\/[\w./-]*)/g)]
    .map((match) => (match[1] ?? '').replace(/[.,]+$/, ''))
}

function entries (folder: string, kind: 'file' | 'folder'): string[] {
  return readdirSync(join(root, folder), { withFileTypes: true })
    .filter((entry) => kind === 'folder' ? entry.isDirectory() : entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => entry.name)
}

t.test('every path the page names exists', async (t) => {
  const paths = [...new Set(named(page))]
  t.ok(paths.length > 50, `${paths.length} paths named`)
  t.same(paths.filter((path) => !existsSync(join(root, path))), [], 'none missing')
})

t.test('every folder of lib/ has a row in the folder table', async (t) => {
  const table = page.slice(page.indexOf('## Folders'), page.indexOf('\n## ', page.indexOf('## Folders') + 1))
  for (const folder of entries('lib', 'folder')) t.match(table, `| \`lib/${folder}/\` |`, `lib/${folder}/`)
})

t.test('every plugin and route file is named', async (t) => {
  for (const folder of ['plugins', 'plugins/external', 'routes']) {
    for (const file of entries(folder, 'file')) {
      t.ok(page.includes(`\`${file.replace(/\.ts$/, '')}\``) || page.includes(`${folder}/${file}`), `${folder}/${file}`)
    }
  }
})

t.test('the checks see a missing path', async (t) => {
  t.same(named('see `lib/nowhere/file.ts`, and lib/otp/service.ts.'), ['lib/nowhere/file.ts', 'lib/otp/service.ts'])
  t.notOk(existsSync(join(root, 'lib/nowhere/file.ts')))
})
