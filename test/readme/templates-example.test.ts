/*
 * docs/templates.md's example, copied as a newcomer copies it: the tenants file and every
 * file it shows, written where the page says, pass `npm run templates -- check`; every file
 * the tenants file names is shown. Spoiling one shown file makes the check fail, so the test
 * can tell a passing example from a check that passes anything.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { execForTest as exec } from '../support/processes.js'

const root = fileURLToPath(new URL('../../', import.meta.url))
const page = readFileSync(join(root, 'docs', 'templates.md'), 'utf8')

const tenantsFile = /```json\n(\{\n {2}"tiers"[\s\S]*?)```/.exec(page)?.[1] ?? ''
const shownFiles = new Map([...page.matchAll(/^`templates\/acme\/([^`]+)`:\n\n```liquid\n([\s\S]*?)```/gm)].map((match) => [match[1] ?? '', match[2] ?? '']))

function namedFiles (value: unknown): string[] {
  if (value === null || typeof value !== 'object') return []
  if ('file' in value && typeof value.file === 'string') return [value.file]
  return Object.values(value).flatMap(namedFiles)
}

async function check (dir: string): Promise<{ code: number, stdout: string, stderr: string }> {
  // npm runs scripts from the repository root: the file is named as a path from there.
  return await exec('npm', ['run', '-s', 'templates', '--', 'check', '--file', join(dir, 'tenants.json')], { cwd: root, env: { ...process.env, TENANTS_FILE: '', TEMPLATES_DIR: '' }, timeout: 60_000 })
    .then(({ stdout, stderr }) => ({ code: 0, stdout, stderr }), (error: { code: number, stdout: string, stderr: string }) => error)
}

function copy (dir: string, files: Map<string, string>): void {
  writeFileSync(join(dir, 'tenants.json'), tenantsFile)
  for (const [name, text] of files) {
    mkdirSync(dirname(join(dir, 'templates', 'acme', name)), { recursive: true })
    writeFileSync(join(dir, 'templates', 'acme', name), text)
  }
}

t.test('the example names exactly the files it shows', async (t) => {
  const tenants = JSON.parse(tenantsFile) as unknown
  t.same(namedFiles(tenants).sort(), [...shownFiles.keys()].sort())
  t.ok(shownFiles.size > 0, 'the page shows its files')
})

t.test('copied as shown, `npm run templates -- check` passes', async (t) => {
  const dir = t.testdir({})
  copy(dir, shownFiles)
  const { code, stdout, stderr } = await check(dir)
  t.equal(code, 0, stderr)
  t.match(stdout, /acme/, 'the check names what it passed')
})

t.test('a shown file spoilt (the code written twice), the check fails and says why', async (t) => {
  const dir = t.testdir({})
  const [name = '', text = ''] = [...shownFiles][0] ?? []
  copy(dir, new Map([...shownFiles, [name, `${text}{{ code }}\n`]]))
  const { code, stderr } = await check(dir)
  t.equal(code, 1)
  t.match(stderr, /tenant acme, locale fr, .*the output must contain the code exactly once; it has it 2 times/)
})
