/*
 * docs/architecture.md quotes the import report of lib/ (`npm run -s deps:report`) that `npm
 * run docs` writes from the code: an import added or a unit moved to another layer without
 * running it fails here, so the page never quotes a stale report.
 */
import { readFileSync } from 'node:fs'
import t from 'tap'
import { importReport } from '../../scripts/deps-report.js'
import { architecturePath, REPORT_END, withReport } from '../../scripts/docs.js'

const page = readFileSync(architecturePath, 'utf8')

t.test('the committed report is the one the code gives (npm run docs rewrites it)', async (t) => {
  const report = await importReport()
  t.match(report, /^\s*\d+ {2}lib\/compose\.ts +→ /, 'top first: the composition root')
  t.equal(page, withReport(page, report), 'docs/architecture.md is up to date; run `npm run docs` if not')
})

t.test('a report without its markers is refused, not written elsewhere', async (t) => {
  t.throws(() => withReport(page.replace(REPORT_END, ''), ''), /lost the markers around its report/)
})
