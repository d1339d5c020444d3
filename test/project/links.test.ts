/*
 * Every relative link of the READMEs, UPGRADING, CHANGELOG and docs/ pages leads somewhere: the
 * file exists, and a `#fragment` names a heading of the target page, with anchors computed as
 * GitHub computes them. Links inside code blocks are code, not links (markdown-it decides).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import GithubSlugger from 'github-slugger'
import MarkdownIt, { type Token } from 'markdown-it'
import t from 'tap'

const root = fileURLToPath(new URL('../../', import.meta.url))
const markdown = new MarkdownIt({ html: true })

function flatten (tokens: Token[]): Token[] {
  return tokens.flatMap((token) => [token, ...flatten(token.children ?? [])])
}

function tokensOf (file: string): Token[] {
  return flatten(markdown.parse(readFileSync(file, 'utf8'), {}))
}

const anchorCache = new Map<string, Set<string>>()
function anchorsOf (file: string): Set<string> {
  const known = anchorCache.get(file)
  if (known !== undefined) return known
  const slugger = new GithubSlugger()
  const tokens = tokensOf(file)
  const anchors = new Set<string>()
  tokens.forEach((token, i) => {
    if (token.type === 'heading_open') anchors.add(slugger.slug(tokens[i + 1]?.content ?? ''))
  })
  anchorCache.set(file, anchors)
  return anchors
}

function linksOf (file: string): string[] {
  return tokensOf(file).filter((token) => token.type === 'link_open').map((token) => String(token.attrGet('href') ?? ''))
}

/** The links of a page that lead nowhere: a missing file, or a fragment no heading has. */
function brokenLinks (file: string): string[] {
  return linksOf(file).filter((href) => {
    if (/^[a-z][a-z0-9+.-]*:/i.test(href)) return false
    const [path = '', fragment] = href.split('#')
    const target = path === '' ? file : join(dirname(file), decodeURIComponent(path))
    if (!existsSync(target)) return true
    if (fragment === undefined) return false
    return !(statSync(target).isFile() && target.endsWith('.md') && anchorsOf(target).has(decodeURIComponent(fragment)))
  })
}

const pages = ['README.md', 'UPGRADING.md', 'CHANGELOG.md', 'clients/typescript/README.md', 'bench/README.md', ...readdirSync(join(root, 'docs')).filter((name) => name.endsWith('.md')).map((name) => `docs/${name}`)]

t.test('every relative link and anchor resolves', async (t) => {
  for (const page of pages) {
    const file = join(root, page)
    if (!t.ok(existsSync(file), `${page} exists`)) continue
    t.same(brokenLinks(file), [], `${page}: ${linksOf(file).length} links, none broken`)
  }
})

t.test('the checker finds broken links', async (t) => {
  const dir = t.testdir({
    'a.md': '# Title\n\n## A section: with punctuation\n\n[ok](#a-section-with-punctuation) [bad](#nothing) [file](b.md#b) [missing](c.md) [no heading](b.md#c) [web](https://example.com/#x)\n\n```md\n[in code](#ignored)\n```\n',
    'b.md': '# B\n'
  })
  t.same(brokenLinks(join(dir, 'a.md')), ['#nothing', 'c.md', 'b.md#c'])
})

t.test('the README stays short', async (t) => {
  const lines = readFileSync(join(root, 'README.md'), 'utf8').split('\n').length
  t.ok(lines <= 250, `README.md has ${lines} lines, at most 250`)
})

t.test('every `npm run` the pages show names a script of package.json', async (t) => {
  const { scripts } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  for (const page of pages) {
    const file = join(root, page)
    if (!existsSync(file)) continue
    const named = [...readFileSync(file, 'utf8').matchAll(/npm run (?:-s )?([\w:-]+)/g)].map((match) => match[1] ?? '')
    t.same(named.filter((name) => !(name in scripts)), [], `${page}: ${new Set(named).size} scripts`)
  }
})
