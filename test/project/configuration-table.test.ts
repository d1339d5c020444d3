/*
 * docs/configuration.md's table of environment variables is the one `npm run docs` writes
 * from schemas/env.ts: a variable added, renamed, re-described or given another default
 * without running it fails here.
 */
import { readFileSync } from 'node:fs'
import { Type } from '@sinclair/typebox'
import t from 'tap'
import { EnvSchema } from '../../schemas/env.js'
import { configurationPath, configurationTable, TABLE_END, TABLE_START, withTable } from '../../scripts/docs.js'

const page = readFileSync(configurationPath, 'utf8')

t.test('the committed table is the one the schema gives (npm run docs rewrites it)', async (t) => {
  t.equal(page, withTable(page), 'docs/configuration.md is up to date; run `npm run docs` if not')
})

t.test('one row per variable, with its default, allowed values and description', async (t) => {
  const table = page.slice(page.indexOf(TABLE_START), page.indexOf(TABLE_END))
  const rows = table.split('\n').filter((line) => line.startsWith('| `'))
  t.same(rows.map((row) => /^\| `([A-Z0-9_]+)` \|/.exec(row)?.[1]), Object.keys(EnvSchema.properties))
  t.match(table, '| `PORT` | `3000` | integer, 0 to 65535 | TCP port to listen on. |')
  t.match(table, '| `MAIL_TRANSPORT` | `log` | `log`, `ses`, `smtp` |')
  t.match(table, '| `RATE_LIMIT_MAILBOX` | `15/15m` | `max/window` (`15/15m`), or `off` |')
  t.match(table, /\| `OTP_HMAC_KEYS` \| \(unset\) \| text \| Comma-separated/)
})

t.test('a change to the schema makes the committed table stale', async (t) => {
  const added = { ...EnvSchema.properties, NEW_VARIABLE: Type.Integer({ default: 7, minimum: 1, maximum: 9, description: 'A | new one.' }) }
  const stale = withTable(page, configurationTable(added))
  t.not(stale, page)
  t.match(stale, '| `NEW_VARIABLE` | `7` | integer, 1 to 9 | A \\| new one. |', 'pipes in a description are escaped')
  const redescribed = { ...EnvSchema.properties, PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535, description: 'Another text.' }) }
  t.not(withTable(page, configurationTable(redescribed)), page)
  t.throws(() => withTable(page.replace(TABLE_END, '')), /lost the markers/)
})
