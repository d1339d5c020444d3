import { readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { EnvSchema } from '../schemas/env.js'
import { importReport } from './deps-report.js'
import { prometheusRule, prometheusRulePath } from './prometheus-rule.js'

/** The page whose table of environment variables is written from the schema. */
export const configurationPath = fileURLToPath(new URL('../docs/configuration.md', import.meta.url))

export const TABLE_START = '<!-- The table below is written by `npm run docs` from schemas/env.ts: edit the schema, not the table. -->'
export const TABLE_END = '<!-- End of the table written by `npm run docs`. -->'

/** The page whose report of lib/'s imports is written from the code. */
export const architecturePath = fileURLToPath(new URL('../docs/architecture.md', import.meta.url))

export const REPORT_START = '<!-- The report below is written by `npm run docs` from lib/\'s imports and scripts/lib-layers.cjs: change those, not the report. -->'
export const REPORT_END = '<!-- End of the report written by `npm run docs`. -->'

/** The part of a variable's schema the table shows. */
interface VariableSchema {
  description?: string
  default?: unknown
  type?: string
  minimum?: number
  maximum?: number
  minLength?: number
  pattern?: string
  /** A named pattern's allowed values in words (schemas/patterns.ts, NamedPattern). */
  patternWords?: string
  anyOf?: Array<{ const?: unknown }>
  durationUnit?: 'ms' | 's' | null
  durationMinimum?: string
  durationMaximum?: string
}

function code (value: unknown): string {
  return `\`${String(value)}\``
}

function allowedValues (schema: VariableSchema): string {
  if (schema.anyOf !== undefined) return schema.anyOf.map((member) => code(member.const)).join(', ')
  if (schema.type === 'integer') {
    if (schema.minimum !== undefined && schema.maximum !== undefined) return `integer, ${schema.minimum} to ${schema.maximum}`
    return 'integer'
  }
  if (schema.durationMinimum !== undefined && schema.durationMaximum !== undefined) {
    const plain = schema.durationUnit === 'ms' ? '; a plain number is milliseconds' : schema.durationUnit === 's' ? '; a plain number is seconds' : ''
    return `a duration, ${code(schema.durationMinimum)} to ${code(schema.durationMaximum)}: a number and \`ms\`, \`s\`, \`m\`, \`h\` or \`d\` (\`30s\`, \`24h\`)${plain}`
  }
  // A pattern without words is shown as it is, so the table is never wrong.
  if (schema.pattern !== undefined) return schema.patternWords ?? `matching ${code(schema.pattern)}`
  if (schema.minLength !== undefined && schema.minLength > 1) return `at least ${schema.minLength} characters`
  return 'text'
}

function cell (text: string): string {
  return text.replaceAll('|', '\\|').replaceAll('\n', ' ')
}

/** The markdown table of every variable of an environment schema, in the schema's order. */
export function configurationTable (properties: Record<string, unknown> = EnvSchema.properties): string {
  const rows = Object.entries(properties).map(([name, value]) => {
    const schema = value as VariableSchema
    const fallback = schema.default === undefined ? '(unset)' : code(schema.default)
    return `| ${code(name)} | ${fallback} | ${cell(allowedValues(schema))} | ${cell(schema.description ?? '')} |`
  })
  return ['| Variable | Default | Allowed values | Meaning |', '|---|---|---|---|', ...rows].join('\n')
}

/** The page with what stands between two markers replaced. */
function between (page: string, path: string, [startMarker, endMarker]: [string, string], content: string): string {
  const start = page.indexOf(startMarker)
  const end = page.indexOf(endMarker)
  if (start === -1 || end < start) throw new Error(`${path} has lost the markers around its ${startMarker === TABLE_START ? 'table' : 'report'}`)
  return `${page.slice(0, start + startMarker.length)}\n\n${content}\n\n${page.slice(end)}`
}

/** The page with its table (between the markers) replaced by the given one. */
export function withTable (page: string, table: string = configurationTable()): string {
  return between(page, configurationPath, [TABLE_START, TABLE_END], table)
}

/** The architecture page with its import report (between the markers) replaced by the given one. */
export function withReport (page: string, report: string): string {
  return between(page, architecturePath, [REPORT_START, REPORT_END], `\`\`\`\n${report}\`\`\``)
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeFileSync(configurationPath, withTable(readFileSync(configurationPath, 'utf8')))
  process.stdout.write(`wrote ${configurationPath}\n`)
  writeFileSync(prometheusRulePath, prometheusRule())
  process.stdout.write(`wrote ${prometheusRulePath}\n`)
  writeFileSync(architecturePath, withReport(readFileSync(architecturePath, 'utf8'), await importReport()))
  process.stdout.write(`wrote ${architecturePath}\n`)
}
