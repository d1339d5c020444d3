/*
 * The CLI snippets of docs/keys.md and docs/templates.md, taken from the Markdown and run
 * under dash (a POSIX sh) from the repository root, as a reader pastes them: the captured key
 * is the key alone, one line, and preview.html is the HTML part alone. Only the files are
 * moved into the test's directory, so that the repository's own tenants.json is never touched.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { execForTest as exec } from '../support/processes.js'

const root = fileURLToPath(new URL('../../', import.meta.url))
const page = (name: string): string => readFileSync(join(root, 'docs', name), 'utf8')

/** The ```sh blocks of a page that follow `after`. */
function shellBlocks (text: string, after: string): string[] {
  const start = text.indexOf(after)
  if (start === -1) throw new Error(`"${after}" is not on the page`)
  return [...text.slice(start).matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1] ?? '')
}

async function dash (script: string): Promise<{ stdout: string, stderr: string }> {
  return await exec('dash', ['-c', script], { cwd: root, env: { ...process.env, TENANTS_FILE: '', TEMPLATES_DIR: '' }, timeout: 120_000 })
}

t.test('docs/keys.md: the key is captured alone, list and revoke work as shown', async (t) => {
  const [mint = '', reload = ''] = shellBlocks(page('keys.md'), 'Mint keys with the CLI')
  t.match(reload, /^pkill -HUP -f '\^node dist\/server\.js'/, 'the reload signals every instance by pattern (pgrep would give two PIDs to one kill)')
  const dir = t.testdir({})
  const tenants = join(dir, 'tenants.json')
  const captured = join(dir, 'key')
  const script = mint.replace('export TENANTS_FILE=tenants.json', () => `export TENANTS_FILE='${tenants}'`)
  t.not(script, mint, 'the snippet names the tenants file it writes')
  const { stdout, stderr } = await dash(`set -e\n${script}\nprintf '%s' "$KEY" > '${captured}'\n`)
  t.match(readFileSync(captured, 'utf8'), /^sk_live_[A-Za-z0-9]+$/, 'KEY holds the key and nothing else: one line, no npm banner')
  t.match(stdout, /^rk_live_\w+\nacme\tacme_backend\tsecret\tlive\tactive\nacme\trk_live_\w+\trestricted\tlive\tactive\texpires 2027-01-01T00:00:00\.000Z\nrevoked acme\/acme_backend\n$/, 'stdout: the restricted key, the list as shown, then the revocation')
  t.match(stderr, /Created secret live key acme_backend for tenant acme/, 'the id on stderr')
  const file = JSON.parse(readFileSync(tenants, 'utf8')) as { tenants: Array<{ keys: Array<{ id: string, revoked?: boolean }> }> }
  t.same(file.tenants[0]?.keys.map((key) => [key.id.startsWith('rk_live_') ? 'rk_live_…' : key.id, key.revoked === true]), [['acme_backend', true], ['rk_live_…', false]])
})

t.test('docs/templates.md: check and preview as shown, preview.html is HTML', async (t) => {
  const text = page('templates.md')
  const [cli = ''] = shellBlocks(text, '**CLI**, on a tenants file before it goes live')
  // The page's own example tenant and its files, where the page says they go.
  const dir = t.testdir({})
  writeFileSync(join(dir, 'tenants.json'), /```json\n(\{\n {2}"tiers"[\s\S]*?)```/.exec(text)?.[1] ?? '')
  for (const [, name = '', body = ''] of text.matchAll(/^`templates\/acme\/([^`]+)`:\n\n```liquid\n([\s\S]*?)```/gm)) {
    mkdirSync(dirname(join(dir, 'templates', 'acme', name)), { recursive: true })
    writeFileSync(join(dir, 'templates', 'acme', name), body)
  }
  const script = cli.replaceAll('--file tenants.json', () => `--file '${join(dir, 'tenants.json')}'`).replace('> preview.html', () => `> '${join(dir, 'preview.html')}'`)
  t.equal(script.split(dir).length - 1, 4, 'the snippet names its tenants file three times and writes preview.html once')
  await dash(`set -e\n${script}`)
  const html = readFileSync(join(dir, 'preview.html'), 'utf8')
  t.match(html, /^\s*<(!doctype html|html)[\s>]/i, 'preview.html starts as HTML: no npm banner before it')
  t.match(html, /<\/html>\s*$/i, 'and ends as HTML')
})
