/*
 * lib/'s layers, top first, one line each: a unit and the units it imports today
 * (`npm run -s deps:report` prints it; `npm run docs` writes it into docs/architecture.md#layers).
 * The rules themselves are checked by `npm run lint` (.dependency-cruiser.cjs).
 */
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { cruise, type ICruiseResult } from 'dependency-cruiser'

const require = createRequire(import.meta.url)
const { LIB_LAYERS, unitPath } = require('./lib-layers.cjs') as { LIB_LAYERS: string[][], unitPath: (unit: string) => string }

const units = LIB_LAYERS.flat()
const unitOf = (path: string): string | null => path.startsWith('schemas/') ? 'schemas' : units.find((unit) => new RegExp(unitPath(unit)).test(path)) ?? null

/** The report of the units lib/ holds now, as `npm run -s deps:report` prints it. */
export async function importReport (): Promise<string> {
  const { output } = await cruise(['lib'], { tsPreCompilationDeps: true, doNotFollow: { path: 'node_modules' }, outputType: 'json' })
  const result = (typeof output === 'string' ? JSON.parse(output) : output) as ICruiseResult

  const present = new Set<string>()
  const imports = new Map<string, Set<string>>()
  for (const module of result.modules) {
    const from = unitOf(module.source)
    if (from === null || from === 'schemas') continue
    present.add(from)
    for (const dependency of module.dependencies) {
      const to = unitOf(dependency.resolved)
      if (to === null || to === from) continue
      imports.set(from, (imports.get(from) ?? new Set()).add(to))
    }
  }

  const width = Math.max(...[...present].map((unit) => unit.length))
  const lines: string[] = []
  for (const [index, layer] of [...LIB_LAYERS.entries()].reverse()) {
    for (const unit of layer) {
      // A unit placed ahead of the code that will fill it is not listed until it exists.
      if (!present.has(unit)) continue
      const targets = [...(imports.get(unit) ?? [])].sort()
      lines.push(`${String(index).padStart(2)}  ${unit.padEnd(width)}  ${targets.length === 0 ? '(imports no other unit)' : `→ ${targets.join(', ')}`}`)
    }
  }
  return `${lines.join('\n')}\n`
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.stdout.write(await importReport())
}
